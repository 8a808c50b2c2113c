# The CPU backend's kernels and thread pool (library gp_cpu) and their test suite. Included from
# runtime/CMakeLists.txt. -O3 for these sources only (not in Debug builds);
# -ffp-contract=off: the compiler fuses nothing on its own, so a result's operations are the ones
# the source spells out, the same in every build; the float products fuse explicitly (fmaf and
# intrinsics, runtime/cpu_dot.h), in an order fixed by the shapes, so thread counts still agree.
add_library(gp_cpu STATIC
  ${CMAKE_SOURCE_DIR}/runtime/cpu_kernels.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_matmul.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_attention.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_check.c
  ${CMAKE_SOURCE_DIR}/runtime/threadpool.c
  ${CMAKE_SOURCE_DIR}/runtime/quant.c
  ${CMAKE_SOURCE_DIR}/runtime/quant_f32.c
)
# The SIMD paths of the quantized products (runtime/quant_f32_x86.h) and of the float products
# (runtime/cpu_dot.h): one file per path with its own flags, chosen at run time, so the rest of the
# library stays baseline x86-64.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  set(gp_quant_avx2 -mavx2 -mfma -mf16c)
  set(gp_quant_avx512 ${gp_quant_avx2} -mavx512f -mavx512bw -mavx512vl)
  target_sources(gp_cpu PRIVATE ${CMAKE_SOURCE_DIR}/runtime/quant_f32_avx2.c
    ${CMAKE_SOURCE_DIR}/runtime/quant_f32_avx512.c ${CMAKE_SOURCE_DIR}/runtime/cpu_dot_avx2.c
    ${CMAKE_SOURCE_DIR}/runtime/cpu_dot_avx512.c)
  foreach(f quant_f32_avx2 cpu_dot_avx2)
    set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/${f}.c
                                PROPERTIES COMPILE_OPTIONS "${gp_quant_avx2}")
  endforeach()
  foreach(f quant_f32_avx512 cpu_dot_avx512)
    set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/${f}.c
                                PROPERTIES COMPILE_OPTIONS "${gp_quant_avx512}")
  endforeach()
  target_sources(gp_cpu PRIVATE ${CMAKE_SOURCE_DIR}/runtime/quant_amx.c)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/quant_amx.c PROPERTIES COMPILE_OPTIONS
    "${gp_quant_avx512};-mavx512bf16;-mamx-tile;-mamx-bf16")
endif()
# -fno-trapping-math (floating-point exceptions are never looked at; no value changes): loops with
# quiet compares and float-to-int conversions, as gp_expf's (runtime/cpu_internal.h), vectorize.
set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/cpu_kernels.c
  ${CMAKE_SOURCE_DIR}/runtime/cpu_attention.c PROPERTIES COMPILE_OPTIONS -fno-trapping-math)
gp_target_flags(gp_cpu)
target_compile_options(gp_cpu PRIVATE -ffp-contract=off
  $<$<NOT:$<CONFIG:Debug>>:-O3>)
target_link_libraries(gp_cpu PUBLIC gp_core m Threads::Threads)

gp_add_suite(NAME kernels SOURCES ${CMAKE_SOURCE_DIR}/tests/test_kernels.c LIBS gp_cpu)
gp_add_suite(NAME quant SOURCES ${CMAKE_SOURCE_DIR}/tests/test_quant.c LIBS gp_cpu)
gp_add_suite(NAME quant_f32 SOURCES ${CMAKE_SOURCE_DIR}/tests/test_quant_f32.c LIBS gp_cpu)

if(EXISTS ${CMAKE_SOURCE_DIR}/bench/cpu_kernels.c)
  add_executable(bench_cpu_kernels ${CMAKE_SOURCE_DIR}/bench/cpu_kernels.c)
  gp_target_flags(bench_cpu_kernels)
  target_link_libraries(bench_cpu_kernels PRIVATE gp_cpu)
  set_target_properties(bench_cpu_kernels PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
