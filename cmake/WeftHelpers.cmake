# weft_library(NAME SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...] [PCH header...])
# One static library per module, sources listed explicitly.
function(weft_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS;PCH" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include
                                            ${CMAKE_BINARY_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(WEFT_FAULT_INJECTION)
    target_compile_definitions(${name} PUBLIC WEFT_FAULT_INJECTION=1)
  endif()
  if(ARG_PCH)
    target_precompile_headers(${name} PRIVATE ${ARG_PCH})
  endif()
endfunction()

# weft_executable_allocator(TARGET): the allocator the servers run on. With
# WEFT_JEMALLOC, jemalloc replaces malloc in that executable: per-thread
# caches and retained pages cut the malloc/free and page-fault cost of the
# RPC and RocksDB paths (docs/BENCHMARKS.md, "jemalloc"). Executables only.
function(weft_executable_allocator target)
  if(WEFT_JEMALLOC)
    target_link_libraries(${target} PRIVATE PkgConfig::JEMALLOC)
    target_compile_definitions(${target} PRIVATE WEFT_JEMALLOC=1)
  endif()
endfunction()

# weft_test(NAME SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s])
# Every test file is registered here; a test outside the build rots.
function(weft_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  if(WEFT_FAULT_INJECTION)
    target_compile_definitions(${name} PRIVATE WEFT_FAULT_INJECTION=1)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
                       ENVIRONMENT "WEFT_BIN=$<TARGET_FILE:weft>")
endfunction()
