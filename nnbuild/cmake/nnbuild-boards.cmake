# Where nnbuild's CMake files find boards and Python (included by nnbuild.cmake and the toolchain
# files; one home for both):
#   NNBUILD_PYTHON  the interpreter with nnbuild (-D, else $NNBUILD_PYTHON, else python3); cached.
#   NNBUILD_BOARDS  folders of the project's own board files (-D, else $NNBUILD_BOARDS at the first
#                   configure); cached, relative entries from the source folder, so later configures
#                   and every ninja run use it without any environment.
#   <source>/boards a project's boards/ folder at its root is searched without any variable, first
#                   (before NNBUILD_BOARDS and the boards nnbuild ships, as under SCons and the CLI).
#   NNBUILD_BOARD   a board name, or a board file (absolute, or relative to the source folder).
# Sets ENV{NNBUILD_BOARDS} for configure-time calls and NNBUILD_STEP_COMMAND, the command every
# build step runs through (the same board folders in its environment).

if(NOT NNBUILD_PYTHON)
  if(DEFINED ENV{NNBUILD_PYTHON})
    set(NNBUILD_PYTHON "$ENV{NNBUILD_PYTHON}")
  else()
    find_program(NNBUILD_PYTHON NAMES python3 python REQUIRED)
  endif()
endif()
set(NNBUILD_PYTHON "${NNBUILD_PYTHON}" CACHE FILEPATH "Python interpreter with nnbuild installed")

if(NOT DEFINED NNBUILD_BOARD_DIRS)   # set already inside a try_compile (forwarded by the toolchain file)
  if(NOT DEFINED CACHE{NNBUILD_BOARDS})
    if(DEFINED NNBUILD_BOARDS)
      set(_nnbuild_boards "${NNBUILD_BOARDS}")
    elseif(DEFINED ENV{NNBUILD_BOARDS})
      set(_nnbuild_boards "$ENV{NNBUILD_BOARDS}")
    else()
      set(_nnbuild_boards "$ENV{NNBUILD_TOOLCHAINS}")
    endif()
    set(NNBUILD_BOARDS "${_nnbuild_boards}" CACHE STRING
        "Folders of the project's own board files (NAME.json), ':'-separated; relative to the source folder")
  endif()
  set(NNBUILD_BOARD_DIRS "")
  if(IS_DIRECTORY "${CMAKE_SOURCE_DIR}/boards")
    list(APPEND NNBUILD_BOARD_DIRS "${CMAKE_SOURCE_DIR}/boards")
  endif()
  string(REPLACE ":" ";" _nnbuild_entries "$CACHE{NNBUILD_BOARDS}")
  foreach(_nnbuild_dir IN LISTS _nnbuild_entries)
    if(_nnbuild_dir)
      get_filename_component(_nnbuild_dir "${_nnbuild_dir}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
      if(NOT IS_DIRECTORY "${_nnbuild_dir}")
        message(FATAL_ERROR "NNBUILD_BOARDS: board directory '${_nnbuild_dir}' not found")
      endif()
      list(APPEND NNBUILD_BOARD_DIRS "${_nnbuild_dir}")
    endif()
  endforeach()
  if(NNBUILD_BOARD MATCHES "\\.json$")
    get_filename_component(NNBUILD_BOARD "${NNBUILD_BOARD}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
    if(NOT EXISTS "${NNBUILD_BOARD}")
      message(FATAL_ERROR "NNBUILD_BOARD: board file '${NNBUILD_BOARD}' not found")
    endif()
    set(NNBUILD_BOARD "${NNBUILD_BOARD}" CACHE STRING "nnbuild board: a name or a board file" FORCE)
  endif()
endif()
string(REPLACE ";" ":" _nnbuild_dirs_env "${NNBUILD_BOARD_DIRS}")
set(ENV{NNBUILD_BOARDS} "${_nnbuild_dirs_env}")
unset(ENV{NNBUILD_TOOLCHAINS})
set(NNBUILD_STEP_COMMAND "${CMAKE_COMMAND}" -E env --unset=NNBUILD_TOOLCHAINS
    "NNBUILD_BOARDS=${_nnbuild_dirs_env}" "${NNBUILD_PYTHON}")
