# CMake toolchain for nnbuild's Cortex-M boards (arm-none-eabi-gcc; flags from the board file):
#   cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=<cmake-dir>/arm-none-eabi-gcc.cmake [-DNNBUILD_BOARD=rp2040] ...
# NNBUILD_BOARD: stm32f407 (Cortex-M4F, the default) or rp2040 (Cortex-M0+), or any board (name or
# file) compiled by arm-none-eabi-gcc. The application links with the board's ldflags (newlib with
# semihosting, --specs=rdimon.specs): an image for the checks (memory, stack bound, WCET); a product
# image needs the part's own startup code and linker script (target_link_options of the app).
if(NOT NNBUILD_BOARD)
  set(NNBUILD_BOARD stm32f407)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/nnbuild-board.cmake")
if(NOT CMAKE_C_COMPILER MATCHES "arm-none-eabi-gcc$")
  message(FATAL_ERROR "arm-none-eabi-gcc.cmake: board '${NNBUILD_BOARD}' is compiled by ${CMAKE_C_COMPILER}, not "
                      "arm-none-eabi-gcc (use nnbuild-board.cmake for it)")
endif()
