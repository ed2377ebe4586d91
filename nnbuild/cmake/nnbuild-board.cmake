# CMake toolchain of an nnbuild board (its compiler, target flags and link flags read from the board
# file by nnbuild): cmake -DCMAKE_TOOLCHAIN_FILE=<cmake-dir>/nnbuild-board.cmake -DNNBUILD_BOARD=<board>
# <board>: a name (a board folder's NAME.json: NNBUILD_BOARDS, the project's boards/, the shipped
# ones) or a board file, absolute or relative to the source folder. Python: -DNNBUILD_PYTHON or python3.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
include("${CMAKE_CURRENT_LIST_DIR}/nnbuild-boards.cmake")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES NNBUILD_BOARD NNBUILD_PYTHON NNBUILD_BOARD_DIRS)
execute_process(COMMAND "${NNBUILD_PYTHON}" -m nnbuild.pipeline cmake-board --board "${NNBUILD_BOARD}"
                WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}" OUTPUT_VARIABLE _nnbuild_board RESULT_VARIABLE _nnbuild_rc ERROR_VARIABLE _nnbuild_err)
if(_nnbuild_rc)
  string(STRIP "${_nnbuild_err}" _nnbuild_err)
  message(FATAL_ERROR "${_nnbuild_err}")
endif()
cmake_language(EVAL CODE "${_nnbuild_board}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
