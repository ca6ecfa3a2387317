// Pathfinder images (data.hpp): curves drawn as smooth random walks, kept a pixel apart from each other,
// and two dots at curve ends, on one curve (label 1) or on two (label 0).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/model/data.hpp"
#include "linattn/random.hpp"

namespace linattn::model {
namespace {

// The largest turn of a curve per pixel (radians): curves bend, rarely fold onto themselves.
constexpr double kMaxTurn = 0.35;
// Tries for one curve before giving it up, and for a whole image before failing.
constexpr int kCurveTries = 200, kImageTries = 1000;

struct Pixel {
  int64_t x, y;
};

// One image being drawn: which curve owns each pixel (0: none), so that a new curve can be kept off
// every other one.
class Canvas {
 public:
  explicit Canvas(int64_t side) : side_(side), owner_(size_t(side * side), 0), value_(size_t(side * side), 0) {}

  // A smooth walk of `length` distinct pixels from a random start and heading, inside the border (a dot
  // at either end must fit), or nothing when it leaves the image.
  std::vector<Pixel> walk(Random& rng, int64_t length) const {
    double x = 1 + rng.uniform() * double(side_ - 3), y = 1 + rng.uniform() * double(side_ - 3);
    double heading = rng.uniform() * 2 * std::numbers::pi;
    std::vector<Pixel> path;
    while (int64_t(path.size()) < length) {
      const Pixel p{std::lround(x), std::lround(y)};
      if (p.x < 1 || p.y < 1 || p.x > side_ - 2 || p.y > side_ - 2) return {};
      if (path.empty() || p.x != path.back().x || p.y != path.back().y) path.push_back(p);
      x += std::cos(heading);
      y += std::sin(heading);
      heading += (2 * rng.uniform() - 1) * kMaxTurn;
    }
    return path;
  }

  // The pixels of a curve with dots at the ends asked for.
  static std::vector<Pixel> footprint(const std::vector<Pixel>& path, bool dot_first, bool dot_last) {
    std::vector<Pixel> all = path;
    for (const Pixel& end : {dot_first ? path.front() : Pixel{-1, -1}, dot_last ? path.back() : Pixel{-1, -1}})
      if (end.x >= 0)
        for (int64_t dy = -1; dy <= 1; ++dy)
          for (int64_t dx = -1; dx <= 1; ++dx) all.push_back({end.x + dx, end.y + dy});
    return all;
  }

  // True when no pixel of `pixels` is on or next to (8-neighbourhood) a pixel of another curve.
  bool clear(const std::vector<Pixel>& pixels) const {
    for (const Pixel& p : pixels)
      for (int64_t dy = -1; dy <= 1; ++dy)
        for (int64_t dx = -1; dx <= 1; ++dx) {
          const int64_t x = p.x + dx, y = p.y + dy;
          if (x >= 0 && y >= 0 && x < side_ && y < side_ && owner_[size_t(y * side_ + x)] != 0) return false;
        }
    return true;
  }

  // Draws a curve (its dots 255, its other pixels `value`) as curve number id ≥ 1.
  void draw(const std::vector<Pixel>& path, bool dot_first, bool dot_last, int32_t id, int32_t value) {
    const std::vector<Pixel> all = footprint(path, dot_first, dot_last);
    for (size_t i = 0; i < all.size(); ++i) {
      const size_t at = size_t(all[i].y * side_ + all[i].x);
      owner_[at] = id;
      value_[at] = i < path.size() && value_[at] != PathfinderTask::kDot ? value : PathfinderTask::kDot;
    }
  }

  // Tries to add curve id (dots as asked); false when no walk kept clear of the others.
  bool add(Random& rng, int32_t id, bool dot_first, bool dot_last) {
    const int64_t lo = side_ / 2, hi = side_;  // lengths in pixels
    const auto value =
        int32_t(PathfinderTask::kMinPath + rng.below(PathfinderTask::kMaxPath - PathfinderTask::kMinPath + 1));
    for (int t = 0; t < kCurveTries; ++t) {
      const std::vector<Pixel> path = walk(rng, lo + rng.below(hi - lo + 1));
      if (path.empty() || !clear(footprint(path, dot_first, dot_last))) continue;
      // Two dots on one curve stay apart (3 × 3 squares whose centres are 4 apart do not touch), so an
      // image always shows two dots, whichever the label.
      const int64_t ends = std::max(std::abs(path.front().x - path.back().x), std::abs(path.front().y - path.back().y));
      if (dot_first && dot_last && ends < 4) continue;
      draw(path, dot_first, dot_last, id, value);
      return true;
    }
    return false;
  }

  std::vector<int32_t>& pixels() { return value_; }

 private:
  int64_t side_;
  std::vector<int32_t> owner_, value_;
};

}  // namespace

int64_t check_pathfinder_length(int64_t seq_len) {
  const auto side = int64_t(std::llround(std::sqrt(double(seq_len))));
  if (side * side != seq_len || side < PathfinderTask::kMinSide || side > PathfinderTask::kMaxSide)
    throw Error("linattn::model: pathfinder seq_len is " + std::to_string(seq_len) +
                ", expected side² pixels for a side of " + std::to_string(PathfinderTask::kMinSide) + " to " +
                std::to_string(PathfinderTask::kMaxSide) + " (1024 for 32 × 32, 4096 for 64 × 64)");
  return side;
}

PathfinderTask::PathfinderTask(uint64_t seed) : seed_(seed), tokenizer_(Tokenizer::byte_range(256)) {}

LabelledSequence PathfinderTask::example(Split split, int64_t i, int64_t max_len) const {
  const int64_t side = check_pathfinder_length(max_len);
  check_index(split, i, "pathfinder");
  Random rng(example_seed(seed_, split, i));
  LabelledSequence e;
  e.label = int32_t(rng.below(2));
  // Both classes hold the same number of curves: 2 + side / 16 at most (distractors that find no room
  // are left out, in both classes alike).
  const int64_t curves = 2 + side / 16;
  for (int tries = 0; tries < kImageTries; ++tries) {
    Canvas canvas(side);
    // Label 1: curve 1 carries both dots. Label 0: curves 1 and 2 carry one each.
    const bool marked = e.label == 1 ? canvas.add(rng, 1, true, true)
                                     : canvas.add(rng, 1, true, false) && canvas.add(rng, 2, false, true);
    if (!marked) continue;
    for (int64_t c = e.label == 1 ? 2 : 3; c <= curves; ++c) canvas.add(rng, int32_t(c), false, false);
    e.tokens = std::move(canvas.pixels());
    return e;
  }
  throw Error("linattn::model: no pathfinder image of side " + std::to_string(side) + " in " +
              std::to_string(kImageTries) + " draws");
}

std::string PathfinderTask::text(std::span<const int32_t> pixels, int64_t side) {
  std::string s;
  for (size_t i = 0; i < pixels.size(); ++i) {
    s += pixels[i] == kBackground ? '.' : pixels[i] == kDot ? 'O' : '#';
    if (int64_t(i + 1) % side == 0) s += '\n';
  }
  return s;
}

}  // namespace linattn::model
