# FindCUnit.cmake: locate CUnit and export the imported target CUnit::CUnit.
# The static library is preferred so test binaries run on machines without CUnit installed
# (the GPU machine has none).
find_path(CUNIT_INCLUDE_DIR NAMES CUnit/CUnit.h)
find_library(CUNIT_LIBRARY NAMES libcunit.a cunit)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUnit REQUIRED_VARS CUNIT_LIBRARY CUNIT_INCLUDE_DIR)
if(CUnit_FOUND AND NOT TARGET CUnit::CUnit)
  add_library(CUnit::CUnit UNKNOWN IMPORTED)
  set_target_properties(CUnit::CUnit PROPERTIES
    IMPORTED_LOCATION "${CUNIT_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUNIT_INCLUDE_DIR}")
endif()
mark_as_advanced(CUNIT_INCLUDE_DIR CUNIT_LIBRARY)
