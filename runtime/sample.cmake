# The sampler (runtime/sample.c, part of gp_runtime) and its test suite. Included from
# runtime/CMakeLists.txt.
target_sources(gp_runtime PRIVATE ${CMAKE_SOURCE_DIR}/runtime/sample.c)
target_link_libraries(gp_runtime PUBLIC m)

if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_sample.c)
  gp_add_suite(NAME sample SOURCES ${CMAKE_SOURCE_DIR}/tests/test_sample.c
               LIBS gp_runtime gp_alloc_wrap)
endif()
