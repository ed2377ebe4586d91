# nnbuild for CMake: trained models as build sources.
#
#   list(APPEND CMAKE_MODULE_PATH "<output of: python -m nnbuild.pipeline cmake-dir>")
#   include(nnbuild)
#   nnbuild_add_model(<target> MODEL <file> [BOARD <board>] [NAME <c-name>] [PRECISION <p>|auto] [SHAPE <s>]
#                     [DEADLINE <d>|none] [WCET auto|skip] [TOLERANCE <t>] [RANGE <lo,hi>] [COUNT <n>]
#                     [SEED <n>] [OPT <-Ox>] [ENVIRONMENT <file>] [DATA <file>])
#   add_executable(app main.c ...)
#   nnbuild_add_firmware(app MODELS <target>...)
#
# nnbuild_add_model writes the model's plan (nnbuild.pipeline.plan: generate, reference, check
# programs, runs, semantic check, memory report, WCET, report, gate) as custom commands running
# `python -m nnbuild <step> [--then <step> ...]` (the step table SCons runs too; steps of the same
# inputs share one process), and makes the generated C a static library <target> (the board's
# flags) that depends on <target>_checks: a broken gate fails the build. PRECISION auto builds every
# candidate precision in its own folder and compiles the chosen one's C. nnbuild_add_firmware links
# the libraries into the executable and adds per model memory, WCET and gates over the linked image,
# then <app>.hex and <app>.bin (<app>_nnbuild, in `all`): the images exist only while every gate
# holds. Those checks stand for a held model's own WCET, report and gate: its library no longer
# waits for <target>_checks, which leaves `all` (`ninja <target>_checks` builds them on demand).
# Every keyword is checked: an unknown one, one without a value, or a bad value stops the
# configuration with one line (the nearest keyword suggested). BOARD defaults to NNBUILD_BOARD (set
# by nnbuild's toolchain files), else host. The library's board must be the one CMake compiles for:
# the toolchain file nnbuild-board.cmake (or avr-gcc.cmake) of this folder.
cmake_minimum_required(VERSION 3.20)

include("${CMAKE_CURRENT_LIST_DIR}/nnbuild-boards.cmake")

#: every keyword of each function (docs/using.md documents each one)
set(_NNBUILD_MODEL_KEYWORDS MODEL BOARD NAME PRECISION SHAPE DEADLINE WCET TOLERANCE RANGE COUNT SEED OPT
    ENVIRONMENT DATA)
set(_NNBUILD_FIRMWARE_KEYWORDS MODELS)

function(_nnbuild_export what out)
  execute_process(COMMAND "${NNBUILD_PYTHON}" -m nnbuild.pipeline ${what} ${ARGN} -o "${out}"
                  WORKING_DIRECTORY "${CMAKE_SOURCE_DIR}" RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(rc)
    string(STRIP "${err}" err)
    message(FATAL_ERROR "${err}")
  endif()
endfunction()

# Stops on the first argument cmake_parse_arguments could not place (NN_UNPARSED_ARGUMENTS) or the
# first keyword given without a value (NN_KEYWORDS_MISSING_VALUES); the nearest keyword is asked
# from nnbuild only then, so a correct call costs nothing.
macro(_nnbuild_check_arguments fn target keywords)
  if(NN_UNPARSED_ARGUMENTS)
    list(GET NN_UNPARSED_ARGUMENTS 0 _nn_word)
    execute_process(COMMAND "${NNBUILD_PYTHON}" -m nnbuild.pipeline cmake-nearest "${_nn_word}" ${keywords}
                    OUTPUT_VARIABLE _nn_near OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REPLACE ";" " " _nn_known "${keywords}")
    if(_nn_near)
      message(FATAL_ERROR "${fn}(${target}): unknown keyword '${_nn_word}'; did you mean ${_nn_near}?")
    elseif(_nn_word MATCHES "^[A-Z][A-Z_]*$")
      message(FATAL_ERROR "${fn}(${target}): unknown keyword '${_nn_word}' (keywords: ${_nn_known})")
    else()
      message(FATAL_ERROR "${fn}(${target}): unexpected argument '${_nn_word}': each keyword takes one value "
                          "(keywords: ${_nn_known})")
    endif()
  endif()
  if(NN_KEYWORDS_MISSING_VALUES)
    list(GET NN_KEYWORDS_MISSING_VALUES 0 _nn_word)
    message(FATAL_ERROR "${fn}(${target}): keyword ${_nn_word} is given without a value")
  endif()
endmacro()

function(nnbuild_add_model target)
  set(single ${_NNBUILD_MODEL_KEYWORDS})
  cmake_parse_arguments(PARSE_ARGV 1 NN "" "${single}" "")
  _nnbuild_check_arguments(nnbuild_add_model "${target}" "${_NNBUILD_MODEL_KEYWORDS}")
  if(NOT NN_MODEL)
    message(FATAL_ERROR "nnbuild_add_model(${target}): MODEL <file> is required")
  endif()
  if(NOT NN_BOARD)
    if(NNBUILD_BOARD)
      set(NN_BOARD "${NNBUILD_BOARD}")
    else()
      set(NN_BOARD host)
    endif()
  elseif(NN_BOARD MATCHES "\\.json$")
    get_filename_component(NN_BOARD "${NN_BOARD}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  endif()
  get_filename_component(model "${NN_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  foreach(key DATA ENVIRONMENT)   # a file of the project (an ENVIRONMENT may also be a shipped name)
    if(DEFINED NN_${key} AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${NN_${key}}")
      get_filename_component(NN_${key} "${NN_${key}}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    endif()
  endforeach()
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}")
  set(args --target "${target}" --build-dir "${dir}" --tools-dir "${CMAKE_BINARY_DIR}/nnbuild-tools"
           --model "${model}" --board "${NN_BOARD}")
  foreach(key NAME PRECISION SHAPE DEADLINE WCET TOLERANCE RANGE COUNT SEED OPT ENVIRONMENT DATA)
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
  cmake_parse_arguments(PARSE_ARGV 1 NN "" "" "${_NNBUILD_FIRMWARE_KEYWORDS}")
  _nnbuild_check_arguments(nnbuild_add_firmware "${target}" "${_NNBUILD_FIRMWARE_KEYWORDS}")
  if(NOT NN_MODELS)
    message(FATAL_ERROR "nnbuild_add_firmware(${target}): MODELS <nnbuild_add_model target>... is required")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "nnbuild_add_firmware(${target}): '${target}' is not a target (add_executable first)")
  endif()
  set(args --target "${target}" --elf "$<TARGET_FILE:${target}>" --build-dir "${CMAKE_CURRENT_BINARY_DIR}")
  foreach(model IN LISTS NN_MODELS)
    set(dir "")
    if(TARGET ${model})
      get_property(dir TARGET ${model} PROPERTY NNBUILD_DIR)
    endif()
    if(NOT dir)
      execute_process(COMMAND "${NNBUILD_PYTHON}" -m nnbuild.pipeline cmake-nearest "${model}"
                      ${_NNBUILD_FIRMWARE_KEYWORDS} OUTPUT_VARIABLE near OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(near)
        message(FATAL_ERROR "nnbuild_add_firmware(${target}): unknown keyword '${model}'; did you mean ${near}?")
      endif()
      message(FATAL_ERROR "nnbuild_add_firmware(${target}): '${model}' is not an nnbuild_add_model target")
    endif()
    list(APPEND args --model-dir "${dir}")
  endforeach()
  target_link_libraries(${target} PRIVATE ${NN_MODELS})
  _nnbuild_export(cmake-firmware "${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}.firmware.cmake" ${args})
  include("${CMAKE_CURRENT_BINARY_DIR}/nnbuild-models/${target}.firmware.cmake")
endfunction()
