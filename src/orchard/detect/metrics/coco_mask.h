// COCO instance masks as pycocotools' mask API (maskApi.c) represents them: run-length encodings over the
// column-major (Fortran-order) pixels of an h x w binary mask, starting with a run of zeros (possibly empty),
// alternating 0-runs and 1-runs. Also the compressed string form of `counts` that COCO json and results files
// use, polygon rasterisation (frPoly), area, bounding box and IoU, each computed exactly as pycocotools does, so
// that segm metrics agree.
//
// Masks given to and returned by these functions as pixels are row-major uint8 [h, w] (0 = background, anything
// else = foreground), the layout images have everywhere else in Orchard; the column-major order is internal to
// the run lengths.
//
// Where pycocotools has undefined behaviour (malformed strings, counts that do not add up, a run of more than
// 2^32 - 1 pixels) these functions throw orchard::Error instead. Run lengths that add up but hold empty runs
// past the first are accepted and treated as maskApi.c treats them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchard::detect {

struct Rle {
  int64_t h = 0;
  int64_t w = 0;
  std::vector<uint32_t> counts;  // column-major runs, 0-run first; they sum to h * w
};

// Throws orchard::Error naming `what` unless h, w >= 0, h * w < 2^32 and the counts sum to h * w.
void rle_check(const Rle& rle, const std::string& what = "RLE");

// A row-major [h, w] mask (nonzero = 1) to its run lengths (pycocotools' encode, which for 0/1 masks is the
// same; it would start a new run at every change of byte value). An empty mask (h or w 0) is counts {0}.
Rle rle_encode(const uint8_t* mask, int64_t h, int64_t w);
// The row-major [h, w] mask, 0/1 (pycocotools' decode). Checks `rle` first (rle_check).
std::vector<uint8_t> rle_decode(const Rle& rle);

// COCO's compressed `counts` string (rleToString / rleFrString): every count, from the fourth on (index > 2)
// as the difference to the count two before, in little-endian groups of 5 bits plus a continuation bit
// (0x20), the last group sign-extended from its bit 0x10, each group offset by 48 ('0').
std::string rle_to_string(const Rle& rle);
// Throws orchard::Error naming `what` when the string is malformed or its runs do not sum to h * w.
Rle rle_from_string(const std::string& counts, int64_t h, int64_t w, const std::string& what = "RLE");

// One polygon [x0, y0, x1, y1, ...] in pixel coordinates (COCO's segmentation polygons) to its run lengths as
// rleFrPoly rasterises it: vertices scaled by 5 and rounded, edges walked at that resolution, and a pixel
// (x, y) set when its centre lies inside. Throws orchard::Error for an odd or empty list, a non-finite or huge
// (|5 v| >= 2^30) coordinate. pycocotools' frPyObjects would read a polygon of exactly 4 numbers as a box
// [x, y, w, h]; this function rasterises what it is given.
Rle rle_from_polygon(const std::vector<double>& xy, int64_t h, int64_t w);
// The union of several masks of one size (rleMerge with intersect = false); what pycocotools' frPyObjects +
// merge makes of a multi-polygon annotation. An empty list gives Rle{} (0 x 0, no counts), one mask itself.
// Throws orchard::Error when the sizes differ (pycocotools would return an empty 0 x 0 mask) or a mask fails
// rle_check.
Rle rle_merge(const std::vector<Rle>& rles);

// Number of foreground pixels (rleArea).
uint64_t rle_area(const Rle& rle);
// The tight box [x, y, w, h] in pixels (rleToBbox); all zeros for an empty mask. As in maskApi.c, a 1-run that
// continues into the next column makes the box span the full height.
std::vector<double> rle_to_bbox(const Rle& rle);
// rleIou between one detection and one ground truth of the same size: intersection / union, or intersection /
// area(dt) when the ground truth is a crowd region (`iscrowd`); 0 when they do not intersect (both empty
// included). Throws orchard::Error when the sizes differ (pycocotools gives -1 there, which matches nothing)
// or when the counts of one run out before the other's (where maskApi.c would loop forever).
double rle_iou(const Rle& dt, const Rle& gt, bool iscrowd);

}  // namespace orchard::detect
