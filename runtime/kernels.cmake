# The CPU backend's kernels and thread pool (library gp_cpu) and their test suite. Included from
# runtime/CMakeLists.txt. -O3 for these sources only (not in Debug builds);
# -ffp-contract=off keeps every build's arithmetic the plain IEEE operations the tests expect
# (an FMA in one code path and not in another would break bit-identical results across thread counts).
add_library(gp_cpu STATIC
  ${CMAKE_SOURCE_DIR}/runtime/cpu_kernels.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_matmul.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_attention.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_check.c
  ${CMAKE_SOURCE_DIR}/runtime/threadpool.c
)
gp_target_flags(gp_cpu)
target_compile_options(gp_cpu PRIVATE -ffp-contract=off
  $<$<NOT:$<CONFIG:Debug>>:-O3>)
target_link_libraries(gp_cpu PUBLIC gp_core m Threads::Threads)

gp_add_suite(NAME kernels SOURCES ${CMAKE_SOURCE_DIR}/tests/test_kernels.c LIBS gp_cpu)

if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cpu_kernels.c)
  add_executable(bench_cpu_kernels ${CMAKE_SOURCE_DIR}/bench/cpu_kernels.c)
  gp_target_flags(bench_cpu_kernels)
  target_link_libraries(bench_cpu_kernels PRIVATE gp_cpu)
  set_target_properties(bench_cpu_kernels PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
