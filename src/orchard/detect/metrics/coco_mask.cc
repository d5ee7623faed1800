#include "orchard/detect/metrics/coco_mask.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "orchard/core/error.h"

namespace orchard::detect {
namespace {

constexpr uint64_t kMaxPixels = std::numeric_limits<uint32_t>::max();

uint64_t num_pixels(int64_t h, int64_t w, const std::string& what) {
  if (h < 0 || w < 0) throw Error(what + ": negative mask size " + std::to_string(h) + "x" + std::to_string(w));
  if (h > 0 && static_cast<uint64_t>(w) > kMaxPixels / static_cast<uint64_t>(h))
    throw Error(what + ": mask " + std::to_string(h) + "x" + std::to_string(w) + " has more than 2^32 - 1 pixels");
  return static_cast<uint64_t>(h) * static_cast<uint64_t>(w);
}

void check_same_size(const Rle& a, const Rle& b, const char* what) {
  if (a.h == b.h && a.w == b.w) return;
  throw Error(std::string(what) + ": masks of different sizes, " + std::to_string(a.h) + "x" + std::to_string(a.w) +
              " and " + std::to_string(b.h) + "x" + std::to_string(b.w));
}

// One step of rleMerge: the union (or intersection) of two masks of one size, walking both run lists at once.
// A run boundary is emitted whenever the combined value changes, so empty runs in the inputs do not add runs.
std::vector<uint32_t> merge_two(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, bool intersect) {
  std::vector<uint32_t> out;
  out.reserve(a.size() + b.size());
  uint32_t ca = a[0], cb = b[0], cc = 0;
  bool v = false, va = false, vb = false;
  size_t ia = 1, ib = 1;
  uint64_t remaining = 1;
  while (remaining > 0) {
    const uint32_t c = std::min(ca, cb);
    cc += c;
    ca -= c;
    if (ca == 0 && ia < a.size()) {
      ca = a[ia++];
      va = !va;
    }
    cb -= c;
    if (cb == 0 && ib < b.size()) {
      cb = b[ib++];
      vb = !vb;
    }
    remaining = static_cast<uint64_t>(ca) + cb;
    const bool previous = v;
    v = intersect ? va && vb : va || vb;
    if (v != previous || remaining == 0) {
      out.push_back(cc);
      cc = 0;
    }
  }
  return out;
}

bool boxes_overlap(const std::vector<double>& a, const std::vector<double>& b) {
  return std::fmin(a[0] + a[2], b[0] + b[2]) - std::fmax(a[0], b[0]) > 0 &&
         std::fmin(a[1] + a[3], b[1] + b[3]) - std::fmax(a[1], b[1]) > 0;
}

}  // namespace

void rle_check(const Rle& rle, const std::string& what) {
  const uint64_t pixels = num_pixels(rle.h, rle.w, what);
  uint64_t sum = 0;
  for (uint32_t c : rle.counts) sum += c;
  if (sum != pixels)
    throw Error(what + ": run lengths sum to " + std::to_string(sum) + ", not " + std::to_string(rle.h) + " x " +
                std::to_string(rle.w) + " = " + std::to_string(pixels));
}

Rle rle_encode(const uint8_t* mask, int64_t h, int64_t w) {
  num_pixels(h, w, "rle_encode");
  Rle rle;
  rle.h = h;
  rle.w = w;
  bool previous = false;
  uint32_t run = 0;
  for (int64_t x = 0; x < w; ++x) {
    for (int64_t y = 0; y < h; ++y) {
      const bool v = mask[y * w + x] != 0;
      if (v != previous) {
        rle.counts.push_back(run);
        run = 0;
        previous = v;
      }
      ++run;
    }
  }
  rle.counts.push_back(run);
  return rle;
}

std::vector<uint8_t> rle_decode(const Rle& rle) {
  rle_check(rle, "rle_decode");
  std::vector<uint8_t> mask(static_cast<size_t>(rle.h * rle.w), 0);
  uint64_t pos = 0;  // column-major pixel index
  for (size_t j = 0; j < rle.counts.size(); ++j) {
    const uint64_t end = pos + rle.counts[j];
    if (j % 2 == 1)
      for (; pos < end; ++pos) mask[(pos % rle.h) * rle.w + pos / rle.h] = 1;
    pos = end;
  }
  return mask;
}

std::string rle_to_string(const Rle& rle) {
  std::string s;
  s.reserve(rle.counts.size() * 2);
  for (size_t i = 0; i < rle.counts.size(); ++i) {
    int64_t x = rle.counts[i];
    if (i > 2) x -= rle.counts[i - 2];
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic: a negative difference ends when only sign bits are left
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(static_cast<char>(c + 48));
    }
  }
  return s;
}

Rle rle_from_string(const std::string& counts, int64_t h, int64_t w, const std::string& what) {
  num_pixels(h, w, what);
  Rle rle;
  rle.h = h;
  rle.w = w;
  size_t p = 0;
  while (p < counts.size()) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= counts.size()) throw Error(what + ": compressed counts end inside a number");
      const int c = static_cast<unsigned char>(counts[p]) - 48;
      if (c < 0 || c > 63)
        throw Error(what + ": character " + std::to_string(static_cast<unsigned char>(counts[p])) + " at offset " +
                    std::to_string(p) + " is not a compressed count");
      if (k >= 12) throw Error(what + ": compressed count at offset " + std::to_string(p) + " is too long");
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10)) x |= static_cast<int64_t>(~uint64_t{0} << (5 * k));
    }
    const size_t m = rle.counts.size();
    if (m > 2) x += rle.counts[m - 2];
    if (x < 0 || static_cast<uint64_t>(x) > kMaxPixels)
      throw Error(what + ": run " + std::to_string(m) + " has length " + std::to_string(x));
    rle.counts.push_back(static_cast<uint32_t>(x));
  }
  rle_check(rle, what);
  return rle;
}

Rle rle_from_polygon(const std::vector<double>& xy, int64_t h, int64_t w) {
  const uint64_t pixels = num_pixels(h, w, "rle_from_polygon");
  if (xy.empty() || xy.size() % 2 != 0)
    throw Error("rle_from_polygon: a polygon needs x, y pairs, got " + std::to_string(xy.size()) + " numbers");
  constexpr double kScale = 5;
  constexpr double kLimit = 1 << 30;  // keeps the scaled integer coordinates and their differences in int
  for (double v : xy)
    if (!std::isfinite(v) || std::fabs(kScale * v + .5) >= kLimit)
      throw Error("rle_from_polygon: coordinate " + std::to_string(v) + " is not finite or too large");
  Rle rle;
  rle.h = h;
  rle.w = w;
  if (pixels == 0) {
    rle.counts = {0};
    return rle;
  }

  // The vertices on the 5x grid; the casts truncate towards zero as maskApi.c's do.
  const size_t k = xy.size() / 2;
  std::vector<int> x(k + 1), y(k + 1);
  for (size_t j = 0; j < k; ++j) {
    x[j] = static_cast<int>(kScale * xy[2 * j] + .5);
    y[j] = static_cast<int>(kScale * xy[2 * j + 1] + .5);
  }
  x[k] = x[0];
  y[k] = y[0];

  // Every grid point along the closed boundary, each edge from its first vertex to its second, stepping one
  // grid unit along its longer axis. The edge is always interpolated from its left (or upper) end so that both
  // directions give the same points.
  size_t num_points = 0;
  for (size_t j = 0; j < k; ++j)
    num_points += static_cast<size_t>(std::max(std::abs(x[j] - x[j + 1]), std::abs(y[j] - y[j + 1]))) + 1;
  std::vector<int> u, v;
  u.reserve(num_points);
  v.reserve(num_points);
  for (size_t j = 0; j < k; ++j) {
    int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
    const int dx = std::abs(xe - xs), dy = std::abs(ys - ye);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx >= dy) {
      // dx == dy == 0 (a repeated vertex): maskApi.c divides 0 by 0 here; the one point it adds has the
      // previous and next points at the same x, so its y is never read.
      const double s = dx == 0 ? 0 : static_cast<double>(ye - ys) / dx;
      for (int d = 0; d <= dx; ++d) {
        const int t = flip ? dx - d : d;
        u.push_back(t + xs);
        v.push_back(static_cast<int>(ys + s * t + .5));
      }
    } else {
      const double s = static_cast<double>(xe - xs) / dy;
      for (int d = 0; d <= dy; ++d) {
        const int t = flip ? dy - d : d;
        v.push_back(t + ys);
        u.push_back(static_cast<int>(xs + s * t + .5));
      }
    }
  }

  // Where the boundary crosses a pixel column's centre line, the first pixel at or below the crossing: those
  // are the positions where the mask flips between 0 and 1 going down each column.
  std::vector<uint32_t> a;
  for (size_t j = 1; j < u.size(); ++j) {
    if (u[j] == u[j - 1]) continue;
    double xd = u[j] < u[j - 1] ? u[j] : u[j] - 1;
    xd = (xd + .5) / kScale - .5;
    if (std::floor(xd) != xd || xd < 0 || xd > static_cast<double>(w - 1)) continue;
    double yd = v[j] < v[j - 1] ? v[j] : v[j - 1];
    yd = (yd + .5) / kScale - .5;
    if (yd < 0) yd = 0;
    else if (yd > static_cast<double>(h)) yd = static_cast<double>(h);
    yd = std::ceil(yd);
    a.push_back(static_cast<uint32_t>(static_cast<int64_t>(xd) * h + static_cast<int64_t>(yd)));
  }
  a.push_back(static_cast<uint32_t>(pixels));

  // Sorted flip positions to run lengths; two flips at one position cancel (their empty run is merged into
  // the next one).
  std::sort(a.begin(), a.end());
  uint32_t previous = 0;
  for (uint32_t& p : a) {
    const uint32_t t = p;
    p -= previous;
    previous = t;
  }
  size_t j = 0;
  rle.counts.push_back(a[j++]);
  while (j < a.size()) {
    if (a[j] > 0) {
      rle.counts.push_back(a[j++]);
    } else {
      ++j;
      if (j < a.size()) rle.counts.back() += a[j++];
    }
  }
  return rle;
}

Rle rle_merge(const std::vector<Rle>& rles) {
  if (rles.empty()) return Rle{};
  for (size_t i = 0; i < rles.size(); ++i) {
    rle_check(rles[i], "rle_merge: mask " + std::to_string(i));
    check_same_size(rles[0], rles[i], "rle_merge");
  }
  if (rles.size() == 1) return rles[0];
  Rle out;
  out.h = rles[0].h;
  out.w = rles[0].w;
  if (out.h * out.w == 0) {
    out.counts = {0};
    return out;
  }
  out.counts = rles[0].counts;
  for (size_t i = 1; i < rles.size(); ++i) out.counts = merge_two(out.counts, rles[i].counts, false);
  return out;
}

uint64_t rle_area(const Rle& rle) {
  uint64_t area = 0;
  for (size_t j = 1; j < rle.counts.size(); j += 2) area += rle.counts[j];
  return area;
}

std::vector<double> rle_to_bbox(const Rle& rle) {
  // Unsigned 32-bit arithmetic as in maskApi.c. Only the runs up to the last 1-run matter.
  const size_t m = rle.counts.size() / 2 * 2;
  if (m == 0 || rle.h <= 0) return {0, 0, 0, 0};
  const uint32_t h = static_cast<uint32_t>(rle.h), w = static_cast<uint32_t>(rle.w);
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0, xp = 0;
  for (size_t j = 0; j < m; ++j) {
    cc += rle.counts[j];
    const uint32_t t = cc - static_cast<uint32_t>(j % 2);  // the first pixel of a 1-run, or its last
    const uint32_t y = t % h, x = (t - y) / h;
    if (j % 2 == 0) {
      xp = x;
    } else if (xp < x) {  // the run wraps into a later column: it covers whole column ends
      ys = 0;
      ye = h - 1;
    }
    xs = std::min(xs, x);
    xe = std::max(xe, x);
    ys = std::min(ys, y);
    ye = std::max(ye, y);
  }
  return {static_cast<double>(xs), static_cast<double>(ys), static_cast<double>(xe - xs + 1),
          static_cast<double>(ye - ys + 1)};
}

double rle_iou(const Rle& dt, const Rle& gt, bool iscrowd) {
  check_same_size(dt, gt, "rle_iou");
  // maskApi.c computes the runs only where the tight boxes overlap; elsewhere the IoU is 0.
  if (!boxes_overlap(rle_to_bbox(dt), rle_to_bbox(gt))) return 0;
  const std::vector<uint32_t>& a = dt.counts;
  const std::vector<uint32_t>& b = gt.counts;
  uint32_t ca = a[0], cb = b[0];
  bool va = false, vb = false;
  size_t ia = 1, ib = 1;
  uint64_t inter = 0, uni = 0, remaining = 1;
  while (remaining > 0) {
    const uint32_t c = std::min(ca, cb);
    if (va || vb) {
      uni += c;
      if (va && vb) inter += c;
    }
    ca -= c;
    if (ca == 0 && ia < a.size()) {
      ca = a[ia++];
      va = !va;
    }
    cb -= c;
    if (cb == 0 && ib < b.size()) {
      cb = b[ib++];
      vb = !vb;
    }
    remaining = static_cast<uint64_t>(ca) + cb;
    if ((ca == 0 && ia == a.size() && cb > 0) || (cb == 0 && ib == b.size() && ca > 0))
      throw Error("rle_iou: the run lengths of the two masks do not sum to the same number of pixels");
  }
  if (inter == 0) return 0;
  if (iscrowd) uni = rle_area(dt);
  return static_cast<double>(inter) / static_cast<double>(uni);
}

}  // namespace orchard::detect
