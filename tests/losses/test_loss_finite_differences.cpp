// Every loss family's analytic LOCAL gradient against central finite differences of its loss, in float64, at
// tp 2: the owner of a logit perturbs it, both ranks recompute the (collective) forward, and the owner compares.
// Each family's scenarios (finite_difference_scenarios) put -inf entries, masked rows and its own edge cases in
// the problems; its probes (fd_probes) cover both shards and the columns its loss singles out.
#include <gtest/gtest.h>

#include "loss_families.h"

namespace retort::loss_testing {
namespace {

class LossFiniteDifferences : public ::testing::TestWithParam<NamedCheck> {};

TEST_P(LossFiniteDifferences, LocalGradientMatchesCentralDifferences) {
  GetParam().run();
}

INSTANTIATE_TEST_SUITE_P(Scenarios, LossFiniteDifferences,
                         ::testing::ValuesIn(concat<NamedCheck>({finite_difference_checks<CrossEntropyFamily>(),
                                                                 finite_difference_checks<DistributionLossFamily>(),
                                                                 finite_difference_checks<TopkDistillationFamily>()})),
                         param_name<NamedCheck>);

}  // namespace
}  // namespace retort::loss_testing
