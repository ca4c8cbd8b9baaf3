# Writes OUT (a C++ header with the source's git commit) at every build, touching it only when the commit
# changes, so `retort --version` names the commit the binary was built from without recompiling anything else.
# Run as: cmake -DSOURCE_DIR=... -DOUT=... -P write_build_info.cmake
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status)
if(NOT status EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")  # a source tree without git history (a tarball)
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT changes STREQUAL "")
    string(APPEND commit "+changes")
  endif()
endif()
set(content "#pragma once\n// Generated at build time by cmake/write_build_info.cmake.\n#define RETORT_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
