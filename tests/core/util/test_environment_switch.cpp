// switched_off_in_environment: 0, off and false in any case turn a feature off; unset, empty and anything else
// leave it on.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/util/environment_switch.h"

namespace retort {
namespace {

TEST(EnvironmentSwitch, OffOnlyForZeroOffOrFalse) {
  const char* name = "RETORT_TEST_ENVIRONMENT_SWITCH";
  unsetenv(name);
  EXPECT_FALSE(switched_off_in_environment(name));
  for (const char* off : {"0", "off", "OFF", "Off", "false", "FALSE", "False"}) {
    setenv(name, off, 1);
    EXPECT_TRUE(switched_off_in_environment(name)) << off;
  }
  for (const char* on : {"", "1", "on", "true", "no", "00", "offline", " 0"}) {
    setenv(name, on, 1);
    EXPECT_FALSE(switched_off_in_environment(name)) << "'" << on << "'";
  }
  unsetenv(name);
}

}  // namespace
}  // namespace retort
