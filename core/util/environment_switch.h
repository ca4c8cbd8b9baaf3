#pragma once
// The measurement switches read from the environment (RETORT_DECODE_GRAPHS=0 and the like): one spelling of "off"
// for all of them.
namespace retort {

// Whether the environment variable `name` turns its feature off: 0, off or false, in any case. Unset or anything
// else leaves the feature on.
bool switched_off_in_environment(const char* name);

}  // namespace retort
