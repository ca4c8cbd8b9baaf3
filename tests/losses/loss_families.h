#pragma once
// The three loss families the harness runs (loss_family_harness.h): the typed suites' type list and names, and
// every family's reference cases as the parameters of the suites that run them all through one test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cross_entropy_family.h"
#include "distribution_loss_family.h"
#include "loss_family_harness.h"
#include "topk_distillation_family.h"

namespace retort::loss_testing {

using LossFamilies = ::testing::Types<CrossEntropyFamily, DistributionLossFamily, TopkDistillationFamily>;

// Names a typed suite's instances after the family ("LossGroups/TopkDistillation.<test>").
struct FamilyNames {
  template <typename F>
  static std::string GetName(int) {
    return F::kTypeName;
  }
};

inline std::vector<FamilyCase> all_reference_cases() {
  return concat<FamilyCase>({family_cases<CrossEntropyFamily>(CrossEntropyFamily::reference_cases()),
                             family_cases<DistributionLossFamily>(DistributionLossFamily::reference_cases()),
                             family_cases<TopkDistillationFamily>(TopkDistillationFamily::reference_cases())});
}

}  // namespace retort::loss_testing
