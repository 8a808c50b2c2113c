# Allocation counting for the runtime's tests, included from runtime/session.cmake.
# gp_alloc_wrap: object code plus -Wl,--wrap options for the test executables (in-process count).
add_library(gp_alloc_wrap OBJECT ${CMAKE_CURRENT_LIST_DIR}/wrap.c)
gp_target_flags(gp_alloc_wrap)
target_link_libraries(gp_alloc_wrap PUBLIC Threads::Threads)
target_link_options(gp_alloc_wrap INTERFACE
  "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free"
  "LINKER:--wrap=posix_memalign,--wrap=aligned_alloc,--wrap=strdup,--wrap=strndup"
  "LINKER:--wrap=mmap,--wrap=munmap,--wrap=pthread_create")

# The LD_PRELOAD shim and the long-generation test: not in sanitizer builds (the sanitizer owns
# malloc, and a preloaded malloc would come before its runtime).
if(NOT GPLAN_SANITIZE)
  add_library(gp_alloc_shim MODULE ${CMAKE_CURRENT_LIST_DIR}/shim.c
              ${CMAKE_SOURCE_DIR}/runtime/alloc_interpose.c)
  gp_target_flags(gp_alloc_shim)
  target_link_libraries(gp_alloc_shim PRIVATE ${CMAKE_DL_LIBS})
  add_test(NAME alloc_long_run
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/long_run.sh $<TARGET_FILE:gplan-compile>
                   $<TARGET_FILE:gplan-run> $<TARGET_FILE:gp_alloc_shim> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR}/alloc_long_run 5000)
  set_tests_properties(alloc_long_run PROPERTIES TIMEOUT 600)
endif()

# The interposer's own counts (gplan_alloc, as gplan-run links it); skipped (77) in sanitizer
# builds, where it is compiled out.
add_executable(alloc_interpose_test ${CMAKE_CURRENT_LIST_DIR}/interpose_test.c)
gp_target_flags(alloc_interpose_test)
target_link_libraries(alloc_interpose_test PRIVATE gplan_alloc)
add_test(NAME alloc_interpose COMMAND alloc_interpose_test)
set_tests_properties(alloc_interpose PROPERTIES SKIP_RETURN_CODE 77)
