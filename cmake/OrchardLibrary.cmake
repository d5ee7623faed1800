# Layering checked by the build: every Orchard library publishes only its own headers.
#
# orchard_library(<name> SOURCES <x.cc ...> [HEADERS <y.h ...>])
#   A static library. Its headers (the .h beside each source, plus the header-only HEADERS) are
#   linked into ${CMAKE_BINARY_DIR}/include/<name>/orchard/<path>, its PUBLIC include directory.
#   A target therefore sees the headers of the libraries it links (and of what they link PUBLIC)
#   and no others: `#include "orchard/<layer>/..."` of a library that is not on the link line
#   fails to compile, naming the header. There is no include directory for all of src/.
# orchard_stage_headers(<target> <PUBLIC|PRIVATE> <y.h ...>) does the same for an executable.
# orchard_check_headers_claimed() (after every library is declared) fails the configure step for
# a header under src/orchard that no library claims, so none can be reached by accident.
set(ORCHARD_HEADER_STAGE ${CMAKE_BINARY_DIR}/include)

function(orchard_stage_headers target scope)
  set(stage ${ORCHARD_HEADER_STAGE}/${target})
  file(REMOVE_RECURSE ${stage})
  foreach(h ${ARGN})
    set(path ${CMAKE_CURRENT_SOURCE_DIR}/${h})
    file(RELATIVE_PATH rel ${ORCHARD_SRC_ROOT} ${path})
    get_filename_component(dir ${stage}/${rel} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${path} ${stage}/${rel} SYMBOLIC)
    set_property(GLOBAL APPEND PROPERTY ORCHARD_CLAIMED_HEADERS ${path})
  endforeach()
  target_include_directories(${target} ${scope} ${stage})
endfunction()

function(orchard_library name)
  cmake_parse_arguments(L "" "" "SOURCES;HEADERS" ${ARGN})
  add_library(${name} STATIC ${L_SOURCES})
  set(headers ${L_HEADERS})
  foreach(src ${L_SOURCES})
    string(REGEX REPLACE "\\.cc$" ".h" h ${src})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${h})
      list(APPEND headers ${h})
    endif()
  endforeach()
  orchard_stage_headers(${name} PUBLIC ${headers})
endfunction()

function(orchard_check_headers_claimed)
  file(GLOB_RECURSE all CONFIGURE_DEPENDS ${ORCHARD_SRC_ROOT}/orchard/*.h)
  get_property(claimed GLOBAL PROPERTY ORCHARD_CLAIMED_HEADERS)
  set(unclaimed "")
  foreach(h ${all})
    if(NOT h IN_LIST claimed)
      list(APPEND unclaimed ${h})
    endif()
  endforeach()
  if(unclaimed)
    string(REPLACE ";" "\n  " unclaimed "${unclaimed}")
    message(FATAL_ERROR "Orchard: headers no library claims (give each to one orchard_library: a source "
                        "beside it or HEADERS):\n  ${unclaimed}")
  endif()
endfunction()
