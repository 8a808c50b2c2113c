# Installing gplan: one library libgplan (shared, SONAME libgplan.so.0, only the functions its headers declare exported;
# and static) made of the runtime's internal libraries, the public headers under include/gplan/,
# gplan.pc, the CMake package (find_package(gplan) -> gplan::gplan), the tools with man pages, and
# a Debian package (cpack -G DEB). Included at the end of the top CMakeLists.txt, once every
# library exists. Used by scripts/package.sh; the build folders of scripts/test.sh build libgplan
# too (a link of objects that already exist) but install nothing.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
include(CheckCCompilerFlag)

# ---- the version header (gplan.h includes it; macros from project(VERSION)) ----
set(GP_GEN_INCLUDE ${PROJECT_BINARY_DIR}/include/gplan)
configure_file(${PROJECT_SOURCE_DIR}/include/gplan/gplan_version.h.in
               ${GP_GEN_INCLUDE}/gplan_version.h @ONLY)
# gplan.h includes it as a sibling ("gplan_version.h"), as installed; in the build tree it is
# generated apart from include/gplan/, so every target that can see gplan.h (they all link
# gp_core) gets its folder too. Others name it "gplan/gplan_version.h" (gp_target_flags).
target_include_directories(gp_core PUBLIC $<BUILD_INTERFACE:${GP_GEN_INCLUDE}>)

# ---- what makes up libgplan ----
# The roots: the runtime (plan loader, sessions, backends, weights) and the text API (tokenizer,
# chat, families, and the compiler that plans a model's graph in process). Their link closure is walked: every gplan static library in it (gp_runtime, gp_plan,
# gp_cpu, gp_weights, gp_core, gp_cuda when built, any library added later and linked from these)
# puts its objects into libgplan; everything else (zlib, jansson, libm, ...) is an external
# dependency.
set(GP_LIB_ROOTS gp_runtime gp_text)

set(GP_LIB_PARTS "")
set(GP_LIB_EXTERNAL "")
set(_gp_todo ${GP_LIB_ROOTS})
while(_gp_todo)
  list(POP_FRONT _gp_todo _gp_item)
  if(_gp_item MATCHES "^\\$<LINK_ONLY:(.*)>$")
    set(_gp_item ${CMAKE_MATCH_1})
  endif()
  if(_gp_item MATCHES "^\\$<" OR _gp_item STREQUAL "")
    message(WARNING "gplan install: link item '${_gp_item}' not understood; libgplan ignores it")
    continue()
  endif()
  if(TARGET ${_gp_item})
    get_target_property(_gp_type ${_gp_item} TYPE)
    get_target_property(_gp_imported ${_gp_item} IMPORTED)
    if(_gp_type STREQUAL "STATIC_LIBRARY" AND NOT _gp_imported)
      if(NOT _gp_item IN_LIST GP_LIB_PARTS)
        list(APPEND GP_LIB_PARTS ${_gp_item})
        get_target_property(_gp_deps ${_gp_item} LINK_LIBRARIES)
        if(_gp_deps)
          list(APPEND _gp_todo ${_gp_deps})
        endif()
      endif()
      continue()
    endif()
  endif()
  if(NOT _gp_item IN_LIST GP_LIB_EXTERNAL)
    list(APPEND GP_LIB_EXTERNAL ${_gp_item})
  endif()
endwhile()
# An imported target made in a subfolder (pkg_check_modules(X IMPORTED_TARGET ...) in tokenizer/) is
# not visible here; pkg-config's results are cached, so such a PkgConfig::X becomes its flags.
set(_gp_ext "")
foreach(_gp_item IN LISTS GP_LIB_EXTERNAL)
  if(NOT TARGET ${_gp_item} AND _gp_item MATCHES "^PkgConfig::(.+)$")
    if(NOT DEFINED CACHE{${CMAKE_MATCH_1}_LDFLAGS})
      message(FATAL_ERROR "gplan install: no pkg-config results for ${_gp_item}")
    endif()
    list(APPEND _gp_ext ${${CMAKE_MATCH_1}_LDFLAGS} ${${CMAKE_MATCH_1}_LDFLAGS_OTHER})
  elseif(NOT TARGET ${_gp_item} AND _gp_item MATCHES "::")
    message(FATAL_ERROR "gplan install: ${_gp_item}, linked by a library of libgplan, is not "
                        "visible in the top folder (make it there, or IMPORTED GLOBAL)")
  else()
    list(APPEND _gp_ext ${_gp_item})
  endif()
endforeach()
set(GP_LIB_EXTERNAL ${_gp_ext})
message(STATUS "gplan: libgplan = ${GP_LIB_PARTS}; external: ${GP_LIB_EXTERNAL}")

# gp_link_flags(OUT items...): linker flags (-lz, -L/dir -lfoo, -pthread) for external link items,
# for gplan.pc's Libs.private and the installed static target, which cannot name this build's
# imported targets.
function(gp_link_flags out)
  set(flags "")
  foreach(it IN LISTS ARGN)
    if(it MATCHES "^\\$<LINK_ONLY:(.*)>$")
      set(it ${CMAKE_MATCH_1})
    endif()
    if(it STREQUAL "Threads::Threads")
      list(APPEND flags -pthread)
    elseif(TARGET ${it})
      set(loc "")
      get_target_property(type ${it} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(loc ${it} IMPORTED_LOCATION)
        if(NOT loc)
          get_target_property(cfgs ${it} IMPORTED_CONFIGURATIONS)
          if(cfgs)
            list(GET cfgs 0 cfg)
            get_target_property(loc ${it} IMPORTED_LOCATION_${cfg})
          endif()
        endif()
      endif()
      get_target_property(sub ${it} INTERFACE_LINK_LIBRARIES)
      set(subflags "")
      if(sub)
        gp_link_flags(subflags ${sub})
      endif()
      if(loc)
        gp_link_flags(locflags ${loc})
        list(APPEND flags ${locflags})
      endif()
      list(APPEND flags ${subflags})
    elseif(it MATCHES "^/.*/lib([^/]+)\\.(so|a)(\\.[0-9.]+)?$")
      get_filename_component(dir ${it} DIRECTORY)
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND flags -L${dir})
      endif()
      list(APPEND flags -l${CMAKE_MATCH_1})
    elseif(it MATCHES "^-L(.*)$")
      if(NOT CMAKE_MATCH_1 IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND flags ${it})
      endif()
    elseif(it MATCHES "^-")
      list(APPEND flags ${it})
    elseif(NOT it MATCHES "^\\$<")
      list(APPEND flags -l${it})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
gp_link_flags(GP_LIB_FLAGS ${GP_LIB_EXTERNAL})

# The parts' objects go into the shared library too, so they are compiled position-independent;
# no semantic interposition keeps the calls between them direct (and inlinable), as in the static
# libraries.
check_c_compiler_flag(-fno-semantic-interposition GP_HAVE_NO_SEMANTIC_INTERPOSITION)
set(GP_LIB_OBJECTS "")
foreach(part IN LISTS GP_LIB_PARTS)
  set_property(TARGET ${part} PROPERTY POSITION_INDEPENDENT_CODE ON)
  if(GP_HAVE_NO_SEMANTIC_INTERPOSITION)
    target_compile_options(${part} PRIVATE $<$<COMPILE_LANGUAGE:C>:-fno-semantic-interposition>)
  endif()
  list(APPEND GP_LIB_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()

# The CUDA backend, when built, is inside libgplan as well: sessions call gp_backend_cuda directly
# (runtime/session.cmake), so a separate libgplan-cuda would need a plugin loader and a stable
# backend ABI; the cost is that such a libgplan needs libcudart/libcublas where it runs.
set(GP_LIB_LANGUAGE C)
if(TARGET gp_cuda AND gp_cuda IN_LIST GP_LIB_PARTS)
  set(GP_LIB_LANGUAGE CUDA)
  list(APPEND GP_LIB_FLAGS -lstdc++) # the .cu objects' host code is C++
endif()

add_library(gplan SHARED ${GP_LIB_OBJECTS})
add_library(gplan_static STATIC ${GP_LIB_OBJECTS})
foreach(t gplan gplan_static)
  set_target_properties(${t} PROPERTIES OUTPUT_NAME gplan LINKER_LANGUAGE ${GP_LIB_LANGUAGE}
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
set_target_properties(gplan_static PROPERTIES EXPORT_NAME gplan_static)
# The public headers of libgplan's functions (installed below with the headers of the other
# libraries); a new one joins this list.
set(GP_LIB_HEADERS gplan.h text.h tokenizer.h plan.h compile.h)
# The exports are the functions these headers declare (a version script made from them at
# configure time); every other symbol stays inside. The SONAME carries the major version (0 until
# the API is declared stable, then bumped on every incompatible change).
set(GP_EXPORTS "")
foreach(h IN LISTS GP_LIB_HEADERS)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${PROJECT_SOURCE_DIR}/include/gplan/${h})
  file(READ ${PROJECT_SOURCE_DIR}/include/gplan/${h} _gp_src)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" _gp_src "${_gp_src}")
  string(REGEX MATCHALL "gp_[a-z0-9_]+[ \t\n]*\\(" _gp_decls "${_gp_src}")
  foreach(d IN LISTS _gp_decls)
    string(REGEX REPLACE "[ \t\n]*\\($" "" d "${d}")
    list(APPEND GP_EXPORTS ${d})
  endforeach()
endforeach()
list(REMOVE_DUPLICATES GP_EXPORTS)
list(SORT GP_EXPORTS)
list(JOIN GP_EXPORTS ";\n    " _gp_body)
file(WRITE ${PROJECT_BINARY_DIR}/gplan.map "{\n  global:\n    ${_gp_body};\n  local:\n    *;\n};\n")
list(LENGTH GP_EXPORTS _gp_n)
list(JOIN GP_LIB_HEADERS ", " _gp_headers)
message(STATUS "gplan: libgplan exports the ${_gp_n} functions of ${_gp_headers}")
set_target_properties(gplan PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${PROJECT_BINARY_DIR}/gplan.map)
target_link_options(gplan PRIVATE -Wl,--version-script=${PROJECT_BINARY_DIR}/gplan.map)
if(NOT GPLAN_SANITIZE)
  # Every symbol resolved at link time: a dependency missing here shows now, not in a user's link.
  target_link_options(gplan PRIVATE -Wl,--no-undefined)
endif()
target_link_libraries(gplan PRIVATE ${GP_LIB_EXTERNAL})
# Installed, the static library names its dependencies as linker flags (this build's imported
# targets do not exist in a user's project).
target_link_libraries(gplan_static INTERFACE $<INSTALL_INTERFACE:${GP_LIB_FLAGS}>)

# ---- install ----
install(TARGETS gplan gplan_static gplan_alloc EXPORT gplanTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The public headers: self-contained (each includes only headers beside it); libgplan's, then
# alloc_interpose.h, libgplan_alloc.a's (runtime/CMakeLists.txt), and cli.h, header-only (the
# tools' command lines).
list(TRANSFORM GP_LIB_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/gplan/
     OUTPUT_VARIABLE GP_INSTALL_HEADERS)
list(APPEND GP_INSTALL_HEADERS ${PROJECT_SOURCE_DIR}/include/gplan/gplan_types.h
     ${GP_GEN_INCLUDE}/gplan_version.h ${PROJECT_SOURCE_DIR}/include/gplan/alloc_interpose.h
     ${PROJECT_SOURCE_DIR}/include/gplan/cli.h)
install(FILES ${GP_INSTALL_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gplan)

# The server, when libmicrohttpd was found (server/): libgplan_server.a, <gplan/server.h>. Apart from
# libgplan, whose exports it uses, because its engine counts its thread's allocations through
# libgplan_alloc.a, which defines malloc and belongs in an executable. Made of gp_server_api's and
# gp_server's objects (the build's gplan-serve links those libraries); installed, it links
# gplan::gplan and gplan::gplan_alloc and names its system libraries.
if(TARGET gp_server)
  add_library(gplan_server STATIC $<TARGET_OBJECTS:gp_server_api> $<TARGET_OBJECTS:gp_server>)
  set_target_properties(gplan_server PROPERTIES ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  target_include_directories(gplan_server INTERFACE
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set(GP_SERVER_LINK gplan::gplan gplan::gplan_alloc ${MHD_LDFLAGS} ${JANSSON_LDFLAGS} -pthread -lm)
  target_link_libraries(gplan_server INTERFACE $<INSTALL_INTERFACE:${GP_SERVER_LINK}>)
  install(TARGETS gplan_server EXPORT gplanTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/include/gplan/server.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gplan)
endif()

# pkg-config: relocatable (prefix from the .pc file's own place), so an install to any prefix and
# the .deb's /usr both work.
file(RELATIVE_PATH GP_PC_PREFIX /gp/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /gp/prefix)
string(REGEX REPLACE "/$" "" GP_PC_PREFIX "${GP_PC_PREFIX}")
list(JOIN GP_LIB_FLAGS " " GP_PC_LIBS_PRIVATE)
configure_file(${PROJECT_SOURCE_DIR}/cmake/gplan.pc.in ${PROJECT_BINARY_DIR}/gplan.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gplan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake package: find_package(gplan 0.1) -> gplan::gplan (shared), gplan::gplan_static and
# gplan::gplan_alloc (the allocation counter).
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
set(GP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gplan)
install(EXPORT gplanTargets NAMESPACE gplan:: DESTINATION ${GP_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gplanConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gplanConfig.cmake INSTALL_DESTINATION ${GP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gplanConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gplanConfig.cmake ${PROJECT_BINARY_DIR}/gplanConfigVersion.cmake
        DESTINATION ${GP_CMAKE_DIR})

# The tools: every gplan-* executable of tools/ (a new tool is installed without an edit here).
# They link the internal static libraries, as in every build folder, so they need no libgplan.so.
get_property(GP_TOOL_TARGETS DIRECTORY ${PROJECT_SOURCE_DIR}/tools PROPERTY BUILDSYSTEM_TARGETS)
list(FILTER GP_TOOL_TARGETS INCLUDE REGEX "^gplan-")
install(TARGETS ${GP_TOOL_TARGETS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Man pages from each tool's --help (help2man); the NAME line is the tool's own description, the
# first line of its source ("/* gplan-run: runs a plan on a backend: ..."). Off in sanitizer
# builds (they install nothing, and a tool run at build time would go through the sanitizers).
find_program(HELP2MAN help2man)
if(HELP2MAN AND NOT GPLAN_SANITIZE)
  set(GP_MAN_PAGES "")
  foreach(tool IN LISTS GP_TOOL_TARGETS)
    get_target_property(srcs ${tool} SOURCES)
    list(GET srcs 0 src)
    file(STRINGS ${PROJECT_SOURCE_DIR}/tools/${src} first LIMIT_COUNT 1)
    set(desc "a gplan tool")
    if(first MATCHES "^/\\* *${tool}: ([^:.]+)")
      set(desc "${CMAKE_MATCH_1}")
    endif()
    set(page ${PROJECT_BINARY_DIR}/man/${tool}.1)
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND ${HELP2MAN} --no-info --name=${desc} --version-string=${PROJECT_VERSION}
              --output=${page} $<TARGET_FILE:${tool}>
      DEPENDS ${tool} VERBATIM)
    list(APPEND GP_MAN_PAGES ${page})
  endforeach()
  add_custom_target(gplan-man ALL DEPENDS ${GP_MAN_PAGES})
  install(FILES ${GP_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
elseif(NOT GPLAN_SANITIZE)
  message(STATUS "gplan: help2man not found: no man pages (apt-get install help2man)")
endif()

# Everything the install rules take, and nothing else (no tests): scripts/package.sh builds this
# target, with -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON so that cpack does not build the rest.
add_custom_target(gplan-dist)
add_dependencies(gplan-dist gplan gplan_static gplan_alloc ${GP_TOOL_TARGETS})
if(TARGET gplan_server)
  add_dependencies(gplan-dist gplan_server)
endif()
if(TARGET gplan-man)
  add_dependencies(gplan-dist gplan-man)
endif()

# ---- Debian package (cd BUILD && cpack -G DEB): the library, headers, pkg-config and CMake files,
# tools and man pages, in one package "gplan" under /usr ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gplan)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "memory-planning compiler and runtime for neural-network inference")
set(CPACK_PACKAGE_CONTACT "gplan developers <gplan@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Depends from the binaries' own needs (dpkg-shlibdeps), a shlibs file and the ldconfig trigger
# for libgplan.so.0.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_OUTPUT_FILE_PREFIX ${PROJECT_BINARY_DIR}/packages)
include(CPack)
