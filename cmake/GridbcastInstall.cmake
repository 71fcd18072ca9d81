# Install layout (GNUInstallDirs), shared by the libraries' CMakeLists.txt and
# the packaging at the end of the top-level one (cmake/GridbcastPackage.cmake).
#
#   bin/gridbcast, bin/gridbcast-cc, bin/gridbcast-c++      component runtime / development
#   lib/libgridbcast_mpi.so (+ MPI providers)                runtime / mpi_providers
#   include/gridbcast/{topology,lanes,runtime}/*.hpp         development
#   include/gridbcast/mpi/mpi.h                              development
#   lib/libgridbcast_{topology,lanes,runtime}.a              development
#   lib/cmake/gridbcast/, lib/pkgconfig/gridbcast{,-mpi}.pc  development
#   share/man/man1/gridbcast*.1, share/gridbcast/site-configs runtime
include(GNUInstallDirs)
set(CMAKE_INSTALL_DEFAULT_COMPONENT_NAME runtime)
set(GRIDBCAST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gridbcast)

# A library of the C++ API: headers included as "NAME/....hpp" from the source
# tree, from include/gridbcast once installed; exported as gridbcast::NAME.
function(gridbcast_public_library target name)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/gridbcast>)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  install(TARGETS ${target} EXPORT gridbcastTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${name}/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gridbcast/${name} COMPONENT development
    FILES_MATCHING PATTERN "*.hpp")
endfunction()

# pkg-config files find the prefix from their own place (relocatable), however
# deep CMAKE_INSTALL_LIBDIR is (lib, or lib/x86_64-linux-gnu with prefix /usr).
file(RELATIVE_PATH GRIDBCAST_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" GRIDBCAST_PC_TO_PREFIX "${GRIDBCAST_PC_TO_PREFIX}")
set(GRIDBCAST_PC_PREFIX "\${pcfiledir}/${GRIDBCAST_PC_TO_PREFIX}")
