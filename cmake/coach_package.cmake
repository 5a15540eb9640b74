# Installation and the Debian package (deploy/README.md, "A Debian package").
#
#   cmake --install BUILD [--prefix DIR]   the programs, the systemd unit, examples, docs
#   cpack --config BUILD/CPackConfig.cmake -G DEB   coach_VERSION_ARCH.deb
#
# The package's dependencies are computed by dpkg-shlibdeps from the programs' libraries, so a
# build with CUDA (whose libraries are not Debian packages) does not package: build the
# package with -DCOACH_ENABLE_CUDA=OFF (scripts/package.sh does).
include(GNUInstallDirs)

install(TARGETS coach coach-node coach-sim coach-invocation
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The unit goes where Debian keeps packaged units; its defaults file is a conffile.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/coach-node.service
        DESTINATION lib/systemd/system)
# /etc whatever the prefix: install with DESTDIR into a scratch root (deploy_test does).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/coach-node.default
        DESTINATION /etc/default RENAME coach-node)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/coach/examples)
# The Python package that scripts run as workers import (worker::find_python_package looks in
# share/coach/python beside the programs' prefix).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/coach DESTINATION ${CMAKE_INSTALL_DATADIR}/coach/python
        PATTERN __pycache__ EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/deploy
        PATTERN "*.sh" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                                   GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

set(CPACK_PACKAGE_NAME coach)
set(CPACK_PACKAGE_VENDOR "Coach")
set(CPACK_PACKAGE_CONTACT "Coach maintainers <coach@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Elastic deep-learning training: coach, coach-node, coach-sim")
set(CPACK_PACKAGE_DESCRIPTION
    "Coach trains deep-learning jobs on a cluster of hosts and changes their workers and \
parameter-server shards while they run. coach-node is the daemon of one host (a systemd unit \
is included); coach submits and watches jobs, or trains one in-process; coach-sim compares \
scheduling policies on a job trace.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd | sysvinit-core")
# The defaults file is the administrator's: upgrades keep their edits (a conffile).
file(WRITE ${PROJECT_BINARY_DIR}/deb/conffiles "/etc/default/coach-node\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/conffiles)
include(CPack)
