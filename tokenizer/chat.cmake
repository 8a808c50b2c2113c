# Chat templates (tokenizer/chat.c): static library gp_chat, no dependencies, and its test suite.
# Included from tools/CMakeLists.txt (gplan-run links it).
include_guard(GLOBAL)
add_library(gp_chat STATIC ${CMAKE_CURRENT_LIST_DIR}/chat.c)
gp_target_flags(gp_chat)

if(EXISTS ${CMAKE_SOURCE_DIR}/tests/test_chat.c)
  gp_add_suite(NAME chat SOURCES ${CMAKE_SOURCE_DIR}/tests/test_chat.c
               LIBS gp_chat PkgConfig::JANSSON gp_alloc_wrap)
endif()
