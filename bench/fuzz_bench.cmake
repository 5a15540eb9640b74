# fuzz_bench floods a live coach-node with hostile ZeroMQ messages (docs/hostile-input.md). It
# runs coach-node and `coach nodes`, and reads the digits data from the source tree.
# Included from bench/CMakeLists.txt: include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz_bench.cmake)
add_executable(fuzz_bench ${CMAKE_CURRENT_LIST_DIR}/fuzz_bench.cpp)
target_link_libraries(fuzz_bench PRIVATE coach_actors CLI11::CLI11)
target_compile_definitions(fuzz_bench PRIVATE COACH_BINARY_DIR="${PROJECT_BINARY_DIR}"
                                              COACH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(fuzz_bench coach-node coach)
