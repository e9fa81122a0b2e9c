// The environment overrides: variables that change what a kernel or a peer does (A/B switches for
// measurements, a debugging aid). docs/environment.md lists each with its meaning; this is the one place
// they are read. A name that is not in the list is a programming error (Error(internal)), so a new
// override cannot be read without being listed here and documented there.
#pragma once

#include <string_view>

namespace convkit::detail {

// The variable's value, or nullptr when it is unset. `name` must be one of the overrides listed in
// overrides.cpp.
const char* env_override(std::string_view name);

}  // namespace convkit::detail
