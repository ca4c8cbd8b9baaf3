#pragma once
// A command-line flag that is really a config key (`--steps 20` for `train.steps=20`): the hint that turns the
// parser's "unexpected argument" into the line the user meant to type.
#include <string>
#include <string_view>

#include "core/config/config_schema.h"

namespace retort {

// "" unless `flag` (e.g. "--steps", "--steps=20", "--batch-size") names the last part of one or more keys of
// `schema` ("-" read as "_"); then a sentence naming those keys as overrides, keeping the flag's value if it
// had one.
std::string config_key_hint(const ConfigSchema& schema, std::string_view flag);

}  // namespace retort
