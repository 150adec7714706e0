# Every dependency comes from a Debian package (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Protobuf REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(toml11 REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)

pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
if(WEFT_JEMALLOC)
  pkg_check_modules(JEMALLOC REQUIRED IMPORTED_TARGET jemalloc)
endif()
pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET fuse3>=3.12)  # fuse_loop_cfg_* (FUSE_USE_VERSION 312)

# ISA-L ships no CMake or pkg-config file on Debian.
find_path(ISAL_INCLUDE_DIR isa-l/crc.h REQUIRED)
find_library(ISAL_LIBRARY isal REQUIRED)
add_library(weft_isal INTERFACE)
target_include_directories(weft_isal SYSTEM INTERFACE ${ISAL_INCLUDE_DIR})
target_link_libraries(weft_isal INTERFACE ${ISAL_LIBRARY})

# Standalone asio (header only): no Boost.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(weft_asio INTERFACE)
target_include_directories(weft_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(weft_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(weft_asio INTERFACE Threads::Threads)
