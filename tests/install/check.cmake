# Installs an already-built moe_ep into a temporary prefix, then configures,
# builds and runs tests/install/consumer against it through find_package(moe_ep).
#   cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... [-DC_COMPILER=...]
#         [-DCONFIG=Release] -P check.cmake
cmake_minimum_required(VERSION 3.24)
foreach(v BUILD_DIR CONSUMER_DIR WORK_DIR)
  if(NOT ${v})
    message(FATAL_ERROR "check.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_find_package: ${what} failed (${rc}): ${ARGN}")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

set(cfg_args -S ${CONSUMER_DIR} -B ${build}
  -DCMAKE_BUILD_TYPE=${CONFIG}
  -DCMAKE_PREFIX_PATH=${prefix}
  # Only the fresh prefix may satisfy find_package(moe_ep).
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(C_COMPILER)
  list(APPEND cfg_args -DCMAKE_C_COMPILER=${C_COMPILER})
endif()
run("consumer configure" ${CMAKE_COMMAND} ${cfg_args})
run("consumer build" ${CMAKE_COMMAND} --build ${build} --config ${CONFIG})

foreach(exe consumer_shared consumer_static)
  set(path ${build}/${exe})
  if(NOT EXISTS ${path})
    set(path ${build}/${CONFIG}/${exe})
  endif()
  run("${exe}" ${path})
endforeach()
message(STATUS "install_find_package: OK (prefix ${prefix})")
