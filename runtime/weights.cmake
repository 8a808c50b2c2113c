# Weights I/O (safetensors reader/writer, GGUF reader and name aliases, checkpoint sources and
# checks, random weights): static library gp_weights, included from runtime/CMakeLists.txt.
add_library(gp_weights STATIC
  ${CMAKE_CURRENT_LIST_DIR}/filemap.c
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.c
  ${CMAKE_CURRENT_LIST_DIR}/gguf.c
  ${CMAKE_CURRENT_LIST_DIR}/gguf_names.c
  ${CMAKE_CURRENT_LIST_DIR}/weights.c
  ${CMAKE_CURRENT_LIST_DIR}/weights_random.c)
gp_target_flags(gp_weights)
target_link_libraries(gp_weights PUBLIC gp_core PkgConfig::JANSSON m)

gp_add_suite(NAME weights SOURCES ${CMAKE_SOURCE_DIR}/tests/test_weights.c LIBS gp_weights)
gp_add_suite(NAME gguf SOURCES ${CMAKE_SOURCE_DIR}/tests/test_gguf.c ${CMAKE_SOURCE_DIR}/tests/gguf_writer.c
             LIBS gp_weights)
