# What `cmake --install` puts in place beyond the targets' own install rules
# (layout: cmake/GridbcastInstall.cmake), and the Debian packages (cpack -G DEB).
include(CMakePackageConfigHelpers)

# find_package(gridbcast): gridbcast::runtime, ::topology, ::lanes, ::mpi.
install(EXPORT gridbcastTargets NAMESPACE gridbcast:: DESTINATION ${GRIDBCAST_CMAKE_DIR}
  COMPONENT development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gridbcastConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gridbcastConfig.cmake INSTALL_DESTINATION ${GRIDBCAST_CMAKE_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gridbcastConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gridbcastConfig.cmake
  ${PROJECT_BINARY_DIR}/gridbcastConfigVersion.cmake
  DESTINATION ${GRIDBCAST_CMAKE_DIR} COMPONENT development)

# pkg-config --cflags --libs gridbcast (gridbcast-mpi.pc comes from mpi/).
configure_file(${CMAKE_CURRENT_LIST_DIR}/gridbcast.pc.in ${PROJECT_BINARY_DIR}/gridbcast.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gridbcast.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT development)

# Man pages from the --help texts (cmake/gridbcast_man.cmake), rebuilt with the binary.
set(GRIDBCAST_MAN_DIR ${PROJECT_BINARY_DIR}/man/man1)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/man/stamp
  COMMAND ${CMAKE_COMMAND} -DGRIDBCAST=$<TARGET_FILE:gridbcast> -DOUT=${GRIDBCAST_MAN_DIR}
          -DVERSION=${PROJECT_VERSION} -P ${CMAKE_CURRENT_LIST_DIR}/gridbcast_man.cmake
  COMMAND ${CMAKE_COMMAND} -E touch ${PROJECT_BINARY_DIR}/man/stamp
  DEPENDS gridbcast ${CMAKE_CURRENT_LIST_DIR}/gridbcast_man.cmake
  COMMENT "Man pages from gridbcast --help")
add_custom_target(gridbcast_man ALL DEPENDS ${PROJECT_BINARY_DIR}/man/stamp)
install(DIRECTORY ${GRIDBCAST_MAN_DIR}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
  COMPONENT runtime FILES_MATCHING PATTERN "*.1" PATTERN "*.1.gz")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/site-configs/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/gridbcast/site-configs COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT runtime)

# cpack -G DEB: gridbcast (command, libgridbcast_mpi, man pages, site configs),
# gridbcast-dev (headers, static libraries, CMake and pkg-config files, mpicc-like
# wrappers) and, when an MPI was found, gridbcast-mpi-providers (the LD_PRELOAD
# providers for Open MPI / MPICH, which depend on those MPI libraries).
set(CPACK_PACKAGE_NAME gridbcast)
set(CPACK_PACKAGE_VENDOR gridbcast)
set(CPACK_PACKAGE_CONTACT "gridbcast maintainers <gridbcast@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Grid-wide multi-lane broadcast over TCP")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_FILE_NAME gridbcast-${PROJECT_VERSION})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME gridbcast)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME gridbcast-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_MPI_PROVIDERS_PACKAGE_NAME gridbcast-mpi-providers)
# What find_package(gridbcast) / pkg-config need besides gridbcast itself.
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "libyaml-cpp-dev, libssl-dev, libasio-dev")
find_program(GRIDBCAST_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(GRIDBCAST_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  # Debian 12's names for what the binaries link (dpkg-shlibdeps derives the same).
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS
      "libc6 (>= 2.34), libgcc-s1, libstdc++6 (>= 12), libssl3 (>= 3.0.0), libyaml-cpp0.7, libzstd1")
  set(CPACK_DEBIAN_MPI_PROVIDERS_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libssl3")
endif()
set(CPACK_COMPONENTS_ALL runtime development)
if(GRIDBCAST_OPENMPI_FOUND OR GRIDBCAST_MPICH_FOUND)
  list(APPEND CPACK_COMPONENTS_ALL mpi_providers)
endif()
include(CPack)
cpack_add_component(runtime DISPLAY_NAME "gridbcast command and MPI library")
cpack_add_component(development DISPLAY_NAME "gridbcast C++ API and MPI headers" DEPENDS runtime)
cpack_add_component(mpi_providers DISPLAY_NAME "MPI_Bcast providers for Open MPI and MPICH"
  DEPENDS runtime)
