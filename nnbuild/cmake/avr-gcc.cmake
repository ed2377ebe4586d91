# CMake toolchain for nnbuild's AVR board (ATmega1284, avr-gcc; flags from the board file avr.json):
#   cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=<cmake-dir>/avr-gcc.cmake ...
if(NOT NNBUILD_BOARD)
  set(NNBUILD_BOARD avr)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/nnbuild-board.cmake")
