# One INTERFACE target carries the language standard and the warnings for every Coach target.
add_library(coach_options INTERFACE)
target_compile_features(coach_options INTERFACE cxx_std_23)
target_compile_options(coach_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
target_include_directories(coach_options INTERFACE ${PROJECT_SOURCE_DIR})

# coach_add_library(NAME SOURCES ... [DEPS ...])
# Adds the library coach_NAME for one folder, linked to the layers below it.
function(coach_add_library name)
  cmake_parse_arguments(arg "" "" "SOURCES;DEPS" ${ARGN})
  add_library(coach_${name} STATIC ${arg_SOURCES})
  target_link_libraries(coach_${name} PUBLIC coach_options ${arg_DEPS})
  set_target_properties(coach_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # The numeric layers (kernels, ps, worker: the training loop's hot code) stay one object per
  # source, compiled exactly as before; the rest is where the compile time goes.
  if(NOT name MATCHES "^(kernels|ps|worker)$")
    set_target_properties(coach_${name} PROPERTIES UNITY_BUILD ${COACH_UNITY_BUILD})
  endif()
  coach_control_optimization(coach_${name})
endfunction()

# coach_control_optimization(TARGET)
# Release builds compile the control plane (everything but the data path's libraries: kernels,
# ps, worker, wire, shard) with -O2 instead of CMake's -O3: its compile time is most of the
# build's (CAF, CLI11, JSON), and -O3's extra inlining buys it nothing measurable
# (docs/status.md: the programs' figures side by side).
function(coach_control_optimization target)
  if(NOT target MATCHES "^coach_(kernels|ps|worker|wire|shard)$")
    target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O2>)
  endif()
endfunction()

# coach_add_test(NAME LABEL label [TIMEOUT s] [SERIAL] SOURCES ... [DEPS ...])
# Adds a GoogleTest binary and registers each of its tests with ctest under LABEL; SERIAL: each
# runs with no other test beside it (RUN_SERIAL).
function(coach_add_test name)
  cmake_parse_arguments(arg "SERIAL" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  set(serial FALSE)
  if(arg_SERIAL)
    set(serial TRUE)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE coach_options ${arg_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS ${arg_LABEL} TIMEOUT ${arg_TIMEOUT} RUN_SERIAL ${serial}
    DISCOVERY_TIMEOUT 60)
endfunction()
