# Sessions, the CPU and reference backends, and their tests: included from runtime/CMakeLists.txt
# (the sources are in GP_RUNTIME_SOURCES there).

# The CUDA backend (cuda/, library gp_cuda defining gp_backend_cuda) joins gp_runtime when built.
if(GPLAN_HAVE_CUDA AND EXISTS ${CMAKE_SOURCE_DIR}/cuda/CMakeLists.txt)
  target_compile_definitions(gp_runtime PRIVATE GPLAN_HAVE_CUDA)
  target_link_libraries(gp_runtime PUBLIC gp_cuda)
endif()

# Allocation counting for tests (tests/alloc/): a --wrap object library for the in-process count and
# an LD_PRELOAD shim for the long-generation test.
include(${CMAKE_SOURCE_DIR}/tests/alloc/alloc.cmake OPTIONAL)

if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_runtime.c)
  gp_add_suite(NAME runtime SOURCES ${CMAKE_SOURCE_DIR}/tests/test_runtime.c
               ${CMAKE_SOURCE_DIR}/tests/testmodel.c
               LIBS gp_runtime gp_planner gp_dsl gp_alloc_wrap)
endif()

# Quantized weights through compile, plan, load and eval (tests/test_quant_model.c).
gp_add_suite(NAME quant_model SOURCES ${CMAKE_SOURCE_DIR}/tests/test_quant_model.c
             ${CMAKE_SOURCE_DIR}/tests/testmodel.c LIBS gp_runtime gp_planner gp_dsl)

# Routed experts: the CPU kernel, MoE graphs, stacked expert weights (tests/test_moe.c).
gp_add_suite(NAME moe SOURCES ${CMAKE_SOURCE_DIR}/tests/test_moe.c
             ${CMAKE_SOURCE_DIR}/tests/testmodel.c ${CMAKE_SOURCE_DIR}/tests/gguf_writer.c
             LIBS gp_runtime gp_planner gp_dsl gp_alloc_wrap)

# Tensor parallelism on the CPU: cutting weights, the host all-reduce, N devices = 1 device.
gp_add_suite(NAME tp SOURCES ${CMAKE_SOURCE_DIR}/tests/test_tp.c
             ${CMAKE_SOURCE_DIR}/tests/testmodel.c
             LIBS gp_runtime gp_planner gp_dsl gp_alloc_wrap)

# gplan-run's command line (tests/cli/gplan_run.sh).
add_test(NAME cli_gplan_run
         COMMAND sh ${CMAKE_SOURCE_DIR}/tests/cli/gplan_run.sh $<TARGET_FILE:gplan-compile>
                 $<TARGET_FILE:gplan-run> ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/cli_gplan_run)

# Ragged batches: every family with -D n_seq against each sequence alone (tests/test_batch.c).
gp_add_suite(NAME batch SOURCES ${CMAKE_SOURCE_DIR}/tests/test_batch.c
             ${CMAKE_SOURCE_DIR}/tests/testmodel.c LIBS gp_runtime gp_planner gp_dsl gp_family)
