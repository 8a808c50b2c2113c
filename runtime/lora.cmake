# LoRA adapters merged into a model's weights (runtime/lora.c, part of gp_runtime) and their test
# suite. Included from runtime/CMakeLists.txt.
target_sources(gp_runtime PRIVATE ${CMAKE_SOURCE_DIR}/runtime/lora.c)

if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_lora.c)
  gp_add_suite(NAME lora SOURCES ${CMAKE_SOURCE_DIR}/tests/test_lora.c
               ${CMAKE_SOURCE_DIR}/tests/testmodel.c
               LIBS gp_runtime gp_planner gp_dsl gp_alloc_wrap)
endif()
