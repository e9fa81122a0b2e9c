// The environment overrides (src/core/overrides.cpp): every name the sources read through env_override() is
// in the list (else the read throws Error(internal), and only when that code path runs: a GPU-only path
// would fail on the GPU alone) and documented in docs/environment.md. Reads the source tree: runs without
// a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "convkit/status.hpp"
#include "core/overrides.hpp"
#include "test_util.hpp"

namespace {

// The names read in src/: env_override("NAME") calls, and the variant variables the tensor-core tile sets
// hand to env_override (TileSet::env, "CONVKIT_..._VARIANT").
std::set<std::string> names_read_in_sources() {
  const std::regex call(R"re(env_override\("([A-Z0-9_]+)"\))re");
  const std::regex variant(R"re("(CONVKIT_[A-Z0-9_]*_VARIANT)")re");
  std::set<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(CONVKIT_SOURCE_DIR) + "/src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".hpp" && ext != ".h") continue;
    const std::string text = ckt::slurp(e.path().string());
    for (const std::regex* re : {&call, &variant})
      for (std::sregex_iterator it(text.begin(), text.end(), *re), end; it != end; ++it) names.insert((*it)[1]);
  }
  return names;
}

TEST(Overrides, EveryNameTheSourcesReadIsListedAndDocumented) {
  const std::set<std::string> names = names_read_in_sources();
  ASSERT_GE(names.size(), 10u) << "the scan found too few names: is CONVKIT_SOURCE_DIR the source tree?";
  const std::string doc = ckt::slurp(std::string(CONVKIT_SOURCE_DIR) + "/docs/environment.md");
  ASSERT_FALSE(doc.empty());
  for (const std::string& name : names) {
    EXPECT_NO_THROW(convkit::detail::env_override(name))
        << name << " is read but not listed in src/core/overrides.cpp";
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos) << name << " is not documented in docs/environment.md";
  }
}

TEST(Overrides, AnUnlistedNameIsAnError) {
  EXPECT_THROW(convkit::detail::env_override("CONVKIT_NO_SUCH_OVERRIDE"), convkit::Error);
}

}  // namespace
