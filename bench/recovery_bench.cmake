# recovery_bench: what shard replicas cost per epoch and how long a job stalls when a node dies
# (docs/performance.md, "Recovery"). It runs coach-node and `coach keygen`, and reads the digits
# data from the source tree.
# Included from bench/CMakeLists.txt: include(${CMAKE_CURRENT_SOURCE_DIR}/recovery_bench.cmake)
add_executable(recovery_bench ${CMAKE_CURRENT_LIST_DIR}/recovery_bench.cpp)
target_link_libraries(recovery_bench PRIVATE coach_actors CLI11::CLI11)
target_compile_definitions(recovery_bench PRIVATE COACH_BINARY_DIR="${PROJECT_BINARY_DIR}"
                                                  COACH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(recovery_bench coach-node coach)
