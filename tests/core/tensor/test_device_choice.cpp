// The device a user asks for is checked before any work: an unknown name or a GPU this build or machine cannot
// use is an InputError that names the option it came from and the way out.
#include <gtest/gtest.h>

#include "core/tensor/device_choice.h"
#include "core/util/error.h"

namespace retort {
namespace {

std::string input_error(std::string_view text, std::string_view option) {
  try {
    usable_device(text, option);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, TheCpuIsAlwaysUsable) {
  EXPECT_EQ(usable_device("cpu", "--device"), Device::cpu());
}

TEST(DeviceChoice, AnUnknownNameNamesTheOption) {
  const std::string message = input_error("tpu", "run.device");
  EXPECT_NE(message.find("run.device tpu: unknown device"), std::string::npos) << message;
  EXPECT_NE(message.find("cuda:N"), std::string::npos) << message;
}

TEST(DeviceChoice, AMissingGpuNamesTheOptionAndTheCpuWayOut) {
  if (cuda_available()) {
    const std::string message = input_error(fmt::format("cuda:{}", cuda_device_count()), "--device");
    EXPECT_NE(message.find("numbered from 0"), std::string::npos) << message;
    return;
  }
  EXPECT_FALSE(cuda_unavailable_reason().empty());
  const std::string message = input_error("cuda", "--device");
  EXPECT_NE(message.find("--device cuda: "), std::string::npos) << message;
  EXPECT_NE(message.find(cuda_unavailable_reason()), std::string::npos) << message;
  EXPECT_NE(message.find("Use --device cpu"), std::string::npos) << message;
}

}  // namespace
}  // namespace retort
