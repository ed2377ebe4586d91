# nnbuild for CMake: trained models as build sources.
#
#   list(APPEND CMAKE_MODULE_PATH "<output of: python -m nnbuild.pipeline cmake-dir>")
#   include(nnbuild)
#   nnbuild_add_model(<target> MODEL <file> [BOARD <board>] [NAME <c-name>] [PRECISION <p>] [SHAPE <s>]
#                     [DEADLINE <d>] [TOLERANCE <t>] [RANGE <lo,hi>] [COUNT <n>] [SEED <n>] [OPT <-Ox>]
#                     [ENVIRONMENT <file>] [DATA <file>])
#   add_executable(app main.c ...)
#   nnbuild_add_firmware(app MODELS <target>...)
#
# nnbuild_add_model writes the model's plan (nnbuild.pipeline.plan: generate, reference, check
# programs, runs, semantic check, memory report, WCET, report, gate) as custom commands running
# `python -m nnbuild <step>` (the step table SCons runs too), and makes the generated C a static
# library <target> (the board's flags) that depends on <target>_checks: a broken gate fails the
# build. nnbuild_add_firmware links the libraries into the executable and adds <app>.hex,
# <app>.bin and per model memory, WCET and gates over the linked image (<app>_nnbuild, in `all`).
# BOARD defaults to NNBUILD_BOARD (set by nnbuild's toolchain files), else host. The library's board
# must be the one CMake compiles for: the toolchain file nnbuild-<board>.cmake of this folder.
cmake_minimum_required(VERSION 3.20)

if(NOT NNBUILD_PYTHON)
  if(DEFINED ENV{NNBUILD_PYTHON})
    set(NNBUILD_PYTHON "$ENV{NNBUILD_PYTHON}")
  else()
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    set(NNBUILD_PYTHON "${Python3_EXECUTABLE}")
  endif()
endif()
set(NNBUILD_PYTHON "${NNBUILD_PYTHON}" CACHE FILEPATH "Python interpreter with nnbuild installed")

function(_nnbuild_export what out)
  execute_process(COMMAND "${NNBUILD_PYTHON}" -m nnbuild.pipeline ${what} ${ARGN} -o "${out}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc)
    string(STRIP "${err}" err)
    message(FATAL_ERROR "${err}")
  endif()
endfunction()

function(nnbuild_add_model target)
  cmake_parse_arguments(NN "" "MODEL;BOARD;NAME;PRECISION;SHAPE;DEADLINE;TOLERANCE;RANGE;COUNT;SEED;OPT;ENVIRONMENT;DATA" "" ${ARGN})
  if(NOT NN_MODEL)
    message(FATAL_ERROR "nnbuild_add_model(${target}): MODEL <file> is required")
  endif()
  if(NOT NN_BOARD)
    if(NNBUILD_BOARD)
      set(NN_BOARD "${NNBUILD_BOARD}")
    else()
      set(NN_BOARD host)
    endif()
  endif()
  get_filename_component(model "${NN_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}")
  set(args --target "${target}" --build-dir "${dir}" --tools-dir "${CMAKE_BINARY_DIR}/nnbuild-tools"
           --model "${model}" --board "${NN_BOARD}")
  foreach(key NAME PRECISION SHAPE DEADLINE TOLERANCE RANGE COUNT SEED OPT ENVIRONMENT DATA)
    if(DEFINED NN_${key})
      string(TOLOWER "${key}" flag)
      list(APPEND args "--${flag}=${NN_${key}}")
    endif()
  endforeach()
  _nnbuild_export(cmake-model "${dir}/plan.cmake" ${args})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${dir}/plan.json")
  include("${dir}/plan.cmake")
  set_property(TARGET ${target} PROPERTY NNBUILD_DIR "${dir}")
endfunction()

function(nnbuild_add_firmware target)
  cmake_parse_arguments(NN "" "" "MODELS" ${ARGN})
  if(NOT NN_MODELS)
    message(FATAL_ERROR "nnbuild_add_firmware(${target}): MODELS <nnbuild_add_model target>... is required")
  endif()
  set(args --target "${target}" --elf "$<TARGET_FILE:${target}>" --build-dir "${CMAKE_CURRENT_BINARY_DIR}")
  foreach(model IN LISTS NN_MODELS)
    get_property(dir TARGET ${model} PROPERTY NNBUILD_DIR)
    if(NOT dir)
      message(FATAL_ERROR "nnbuild_add_firmware(${target}): '${model}' is not an nnbuild_add_model target")
    endif()
    list(APPEND args --model-dir "${dir}")
  endforeach()
  target_link_libraries(${target} PRIVATE ${NN_MODELS})
  _nnbuild_export(cmake-firmware "${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}.firmware.cmake" ${args})
  include("${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}.firmware.cmake")
endfunction()
