# Helpers that give every ntp target the same warnings, sanitizers and include root.

set(NTP_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
    -Wimplicit-fallthrough)
# GCC 12 reports -Wrestrict false positives inside std::string concatenation at -O3 (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND NTP_WARNINGS -Wno-restrict)
endif()

function(ntp_apply_options target)
  target_compile_options(${target} PRIVATE ${NTP_WARNINGS})
  if(NTP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(NTP_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                              -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# ntp_add_library(NAME SOURCES a.cpp ... [DEPS lib ...] [SYSTEM_DEPS lib ...])
# Creates static library ntp_NAME (alias ntp::NAME) with src/ as its public include root.
function(ntp_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ntp_${name} STATIC ${ARG_SOURCES})
  add_library(ntp::${name} ALIAS ntp_${name})
  target_include_directories(ntp_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ntp_${name} PUBLIC ${ARG_DEPS})
  ntp_apply_options(ntp_${name})
endfunction()

# ntp_add_test(NAME SOURCES a_test.cpp ... [DEPS lib ...] [LABELS label ...] [SERIAL])
# A GoogleTest binary registered with CTest, one CTest entry per TEST(). SERIAL: its tests run
# alone (jobs of a dozen worker processes whose fault detection has timing bounds).
function(ntp_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  ntp_apply_options(${name})
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${labels}" RUN_SERIAL ${serial})
endfunction()

# ntp_use_ntp_binary(TARGET): TARGET runs the `ntp` program as a subprocess. It is built after
# `ntp` and compiled with NTP_BINARY (the program's path) and NTP_SOURCE_DIR (the source root).
function(ntp_use_ntp_binary target)
  target_compile_definitions(${target} PRIVATE NTP_BINARY="$<TARGET_FILE:ntp>"
                                               NTP_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(${target} ntp)
endfunction()

# ntp_add_job_test(NAME <ntp_add_test's arguments>): an ntp_add_test that runs real `ntp` jobs
# (ntp_use_ntp_binary).
function(ntp_add_job_test name)
  ntp_add_test(${name} ${ARGN})
  ntp_use_ntp_binary(${name})
endfunction()

# ntp_add_bench(NAME SOURCES a_bench.cpp ... [DEPS lib ...])
function(ntp_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark ntp_bench_common)
  ntp_apply_options(${name})
endfunction()

# ntp_add_job_bench(NAME SOURCES a.cpp ... [DEPS lib ...]): a benchmark program with its own main
# (not Google Benchmark) that times real `ntp` jobs (ntp_use_ntp_binary).
function(ntp_add_job_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ntp_bench_common ${ARG_DEPS})
  ntp_apply_options(${name})
  ntp_use_ntp_binary(${name})
endfunction()
