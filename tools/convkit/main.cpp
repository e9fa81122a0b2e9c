#include <cstdio>
#include "convkit/convkit.hpp"
int main() {
  for (const auto* a : convkit::algorithms()) std::printf("%s\n", a->name().c_str());
  return 0;
}
