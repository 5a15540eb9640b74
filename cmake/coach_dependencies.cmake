# Every dependency comes from Debian's packages (see README.md for the apt-get line).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # Debian nlohmann-json3-dev: safetensors headers, JSON output

# CAF 0.17.6 ships no CMake config on Debian: find its headers and libraries by hand.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core INTERFACE IMPORTED)
target_include_directories(caf::core INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(caf::core INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)
add_library(caf::io INTERFACE IMPORTED)
target_link_libraries(caf::io INTERFACE caf::core ${CAF_IO_LIBRARY})

# ZeroMQ through cppzmq's config (it links "libzmq", a plain library name on Debian).
find_package(cppzmq CONFIG REQUIRED)

# Logs: Debian libspdlog-dev (built against Debian's libfmt).
find_package(spdlog CONFIG REQUIRED)

# HTTP client of the tests (/metrics, the dashboard; the server is actors/http_server.cpp):
# Debian libcpp-httplib-dev is a compiled library built with OpenSSL, zlib and Brotli support;
# its pkg-config file carries the matching definitions.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
# libsodium (Debian libsodium-dev): the dashboard's admin token, a keyed BLAKE2b of the node's key.
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET GLOBAL libsodium)
