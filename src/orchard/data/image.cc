#include "orchard/data/image.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include "orchard/core/error.h"

namespace orchard::data {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Corrupt-data warnings (e.g. "Premature end of JPEG file") become errors: a silently
// grey-padded training image is worse than a clear failure.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0) {
    auto* err = reinterpret_cast<JpegError*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
  }
}

// Converts (Adobe-inverted) CMYK to RGB in place into `rgb`.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int n, bool inverted) {
  for (int i = 0; i < n; ++i) {
    int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    rgb[3 * i] = static_cast<uint8_t>(c * k / 255);
    rgb[3 * i + 1] = static_cast<uint8_t>(m * k / 255);
    rgb[3 * i + 2] = static_cast<uint8_t>(y * k / 255);
  }
}

// A header's size against the pixel limit, before anything the size implies is allocated.
void check_pixels(int64_t height, int64_t width, int64_t max_pixels, const std::string& what) {
  if (height * width > max_pixels)
    throw DataError(what + ": image of " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                    std::to_string(height * width) + " pixels, more than the limit of " + std::to_string(max_pixels) +
                    " (--max_image_pixels)");
}

// Decodes rows [crop.y, crop.y + crop.height) and columns [crop.x, crop.x + crop.width)
// of a JPEG at DCT scale 1/denom (the crop is given in full-resolution pixels).
Image decode_jpeg(const std::string& bytes, CropWindow crop, int denom, int64_t max_pixels, const std::string& what) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  Image out;
  std::vector<uint8_t> row;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(what + ": cannot decode JPEG: " + err.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_save_markers(&cinfo, JPEG_APP0 + 14, 0xffff);  // Adobe marker: tells CMYK inversion
  jpeg_read_header(&cinfo, TRUE);
  if (static_cast<int64_t>(cinfo.image_height) * cinfo.image_width > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    check_pixels(cinfo.image_height, cinfo.image_width, max_pixels, what);
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  bool adobe = false;
  for (auto* m = cinfo.marker_list; m; m = m->next)
    if (m->marker == JPEG_APP0 + 14 && m->data_length >= 5 && std::memcmp(m->data, "Adobe", 5) == 0) adobe = true;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(denom);
  cinfo.dct_method = JDCT_ISLOW;
  const int full_w = static_cast<int>(cinfo.image_width), full_h = static_cast<int>(cinfo.image_height);
  if (crop.width <= 0 || crop.height <= 0) crop = {0, 0, full_h, full_w};
  if (crop.x < 0 || crop.y < 0 || crop.x + crop.width > full_w || crop.y + crop.height > full_h) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(what + ": crop window outside the " + std::to_string(full_w) + "x" + std::to_string(full_h) +
                    " image");
  }
  jpeg_start_decompress(&cinfo);
  const int ow = static_cast<int>(cinfo.output_width), oh = static_cast<int>(cinfo.output_height);
  // Map the crop into the scaled output grid.
  int x0 = static_cast<int>(static_cast<int64_t>(crop.x) * ow / full_w);
  int y0 = static_cast<int>(static_cast<int64_t>(crop.y) * oh / full_h);
  int x1 = std::max(x0 + 1, static_cast<int>((static_cast<int64_t>(crop.x + crop.width) * ow + full_w - 1) / full_w));
  int y1 = std::max(y0 + 1, static_cast<int>((static_cast<int64_t>(crop.y + crop.height) * oh + full_h - 1) / full_h));
  x1 = std::min(x1, ow);
  y1 = std::min(y1, oh);
  const int cw = x1 - x0, ch = y1 - y0;
  JDIMENSION xoff = static_cast<JDIMENSION>(x0), width = static_cast<JDIMENSION>(cw);
  if (cw < ow) jpeg_crop_scanline(&cinfo, &xoff, &width);  // widens to iMCU boundaries
  const int skip_x = x0 - static_cast<int>(xoff);
  const int comps = cinfo.output_components;
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y0));
  out.height = ch;
  out.width = cw;
  out.pixels.resize(static_cast<size_t>(ch) * cw * 3);
  row.resize(static_cast<size_t>(width) * comps);
  for (int y = 0; y < ch; ++y) {
    JSAMPROW rp = row.data();
    if (jpeg_read_scanlines(&cinfo, &rp, 1) != 1) {
      jpeg_destroy_decompress(&cinfo);
      throw DataError(what + ": truncated JPEG data");
    }
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * cw * 3;
    if (comps == 4) cmyk_to_rgb(row.data() + static_cast<size_t>(skip_x) * 4, dst, cw, adobe);
    else std::memcpy(dst, row.data() + static_cast<size_t>(skip_x) * 3, static_cast<size_t>(cw) * 3);
  }
  // Remaining rows are not needed.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

Image decode_png(const std::string& bytes, int64_t max_pixels, const std::string& what) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
    throw DataError(what + ": cannot decode PNG: " + img.message);
  if (static_cast<int64_t>(img.height) * img.width > max_pixels) {
    png_image_free(&img);
    check_pixels(img.height, img.width, max_pixels, what);
  }
  // Deflate expands at most 1032x, and each row holds a filter byte and at least one bit per
  // pixel: a header claiming more than the file can hold is damage, not an image to allocate.
  const uint64_t least_raw = uint64_t{img.height} * (1 + (uint64_t{img.width} + 7) / 8);
  if (least_raw / 1032 > bytes.size()) {
    png_image_free(&img);
    throw DataError(what + ": PNG header claims " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                    " pixels, more than its " + std::to_string(bytes.size()) + " bytes can hold");
  }
  img.format = PNG_FORMAT_RGB;
  Image out;
  out.height = static_cast<int>(img.height);
  out.width = static_cast<int>(img.width);
  out.pixels.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.pixels.data(), 0, nullptr)) {
    std::string msg = img.message;
    png_image_free(&img);
    throw DataError(what + ": cannot decode PNG: " + msg);
  }
  return out;
}

Image crop_image(const Image& in, CropWindow c) {
  Image out;
  out.height = c.height;
  out.width = c.width;
  out.pixels.resize(static_cast<size_t>(c.height) * c.width * 3);
  for (int y = 0; y < c.height; ++y)
    std::memcpy(out.pixels.data() + static_cast<size_t>(y) * c.width * 3,
                in.pixels.data() + (static_cast<size_t>(c.y + y) * in.width + c.x) * 3,
                static_cast<size_t>(c.width) * 3);
  return out;
}

// Largest DCT denominator in {1, 2, 4, 8} keeping height/denom >= min_h and width/denom >= min_w.
int dct_denominator(int height, int width, int min_h, int min_w) {
  int denom = 1;
  while (denom < 8 && height / (denom * 2) >= min_h && width / (denom * 2) >= min_w) denom *= 2;
  return denom;
}

}  // namespace

ImageFormat sniff_format(const std::string& b) {
  if (b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xff && static_cast<uint8_t>(b[1]) == 0xd8)
    return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

namespace {

ImageSize header_size(const std::string& bytes, const std::string& what) {
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg: {
      tjhandle h = tjInitDecompress();
      int w = 0, hh = 0, sub = 0, cs = 0;
      int rc = tjDecompressHeader3(h, reinterpret_cast<const unsigned char*>(bytes.data()),
                                   static_cast<unsigned long>(bytes.size()), &w, &hh, &sub, &cs);
      std::string msg = rc ? tjGetErrorStr2(h) : "";
      tjDestroy(h);
      if (rc) throw DataError(what + ": cannot read JPEG header: " + msg);
      return {hh, w};
    }
    case ImageFormat::kPng: {
      png_image img{};
      img.version = PNG_IMAGE_VERSION;
      if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
        throw DataError(what + ": cannot read PNG header: " + img.message);
      ImageSize s{static_cast<int>(img.height), static_cast<int>(img.width)};
      png_image_free(&img);
      return s;
    }
    default: throw DataError(what + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) + " bytes)");
  }
}

}  // namespace

ImageSize image_size(const std::string& bytes, const std::string& what, int64_t max_pixels) {
  const ImageSize s = header_size(bytes, what);
  check_pixels(s.height, s.width, max_pixels, what);
  return s;
}

Image decode_image(const std::string& bytes, const std::string& what, int64_t max_pixels) {
  return decode_scaled(bytes, 0, what, max_pixels);
}

Image decode_scaled(const std::string& bytes, int min_short_side, const std::string& what, int64_t max_pixels) {
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg: {
      int denom = 1;
      if (min_short_side > 0) {
        ImageSize s = image_size(bytes, what, max_pixels);
        int short_side = std::min(s.height, s.width);
        denom = dct_denominator(short_side, short_side, min_short_side, min_short_side);
      }
      return decode_jpeg(bytes, {}, denom, max_pixels, what);
    }
    case ImageFormat::kPng: return decode_png(bytes, max_pixels, what);
    default: throw DataError(what + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) + " bytes)");
  }
}

Image decode_crop(const std::string& bytes, CropWindow crop, int min_height, int min_width, const std::string& what,
                  int64_t max_pixels) {
  switch (sniff_format(bytes)) {
    case ImageFormat::kJpeg:
      return decode_jpeg(bytes, crop, dct_denominator(crop.height, crop.width, min_height, min_width), max_pixels,
                         what);
    case ImageFormat::kPng: {
      Image full = decode_png(bytes, max_pixels, what);
      if (crop.width <= 0 || crop.height <= 0) return full;  // an empty window: the whole image, as for JPEG
      if (crop.x < 0 || crop.y < 0 || crop.x + crop.width > full.width || crop.y + crop.height > full.height)
        throw DataError(what + ": crop window outside the image");
      return crop_image(full, crop);
    }
    default: throw DataError(what + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) + " bytes)");
  }
}

namespace {

std::string tj_encode(const uint8_t* pixels, int height, int width, int pixel_format, int subsamp, int quality) {
  tjhandle h = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(h, pixels, width, 0, height, pixel_format, &buf, &size, subsamp, quality, TJFLAG_ACCURATEDCT);
  std::string msg = rc ? tjGetErrorStr2(h) : "";
  std::string out;
  if (!rc) out.assign(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(h);
  if (rc) throw Error("JPEG encode failed: " + msg);
  return out;
}

std::string png_encode(const uint8_t* pixels, int height, int width, uint32_t format) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(width);
  img.height = static_cast<png_uint_32>(height);
  img.format = format;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, pixels, 0, nullptr))
    throw Error(std::string("PNG encode failed: ") + img.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&img, out.data(), &size, 0, pixels, 0, nullptr))
    throw Error(std::string("PNG encode failed: ") + img.message);
  out.resize(size);
  return out;
}

}  // namespace

namespace {

struct PngSource {
  const std::string* bytes;
  size_t offset;
};

void png_read_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->offset + n > src->bytes->size()) png_error(png, "truncated PNG data");
  std::memcpy(out, src->bytes->data() + src->offset, n);
  src->offset += n;
}

void png_error_longjmp(png_structp png, png_const_charp message) {
  auto* msg = static_cast<std::string*>(png_get_error_ptr(png));
  *msg = message;
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

}  // namespace

LabelImage decode_png_label_image(const std::string& bytes, const std::string& what, int64_t max_pixels) {
  if (sniff_format(bytes) != ImageFormat::kPng) throw DataError(what + ": not a PNG file");
  // Everything libpng's longjmp may cross lives behind `s`, which itself never changes after setjmp.
  struct State {
    std::string message, problem;
    PngSource src;
    LabelImage out;
    std::vector<png_bytep> rows;
  };
  const auto state = std::make_unique<State>();
  State* const s = state.get();
  s->src = {&bytes, 0};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s->message, png_error_longjmp, png_ignore_warning);
  if (!png) throw Error("libpng: cannot allocate a reader");
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw DataError(what + ": cannot decode PNG: " + s->message);
  }
  png_set_read_fn(png, &s->src, png_read_memory);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  std::string& problem = s->problem;
  if ((color != PNG_COLOR_TYPE_GRAY && color != PNG_COLOR_TYPE_PALETTE) || depth > 8)
    problem = what +
              ": a label PNG must have one channel (grayscale or palette indices) of at most 8 bits, not colour "
              "type " +
              std::to_string(color) + " at " + std::to_string(depth) + " bits";
  else if (static_cast<int64_t>(height) * width > max_pixels)
    problem = what + ": image of " + std::to_string(width) + "x" + std::to_string(height) +
              " pixels, more than the limit of " + std::to_string(max_pixels) + " (--max_image_pixels)";
  else if (uint64_t{height} * (1 + (uint64_t{width} + 7) / 8) / 1032 > bytes.size())  // as decode_png
    problem = what + ": PNG header claims " + std::to_string(width) + "x" + std::to_string(height) +
              " pixels, more than its " + std::to_string(bytes.size()) + " bytes can hold";
  if (!problem.empty()) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw DataError(problem);
  }
  if (depth < 8) png_set_packing(png);  // one value per byte, as stored (not scaled to 0..255)
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  s->out.height = static_cast<int>(height);
  s->out.width = static_cast<int>(width);
  s->out.values.resize(static_cast<size_t>(height) * width);
  s->rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) s->rows[y] = s->out.values.data() + static_cast<size_t>(y) * width;
  png_read_image(png, s->rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return std::move(s->out);
}

std::string encode_jpeg(const Image& image, int quality) {
  return tj_encode(image.pixels.data(), image.height, image.width, TJPF_RGB, TJSAMP_420, quality);
}
std::string encode_gray_jpeg(const uint8_t* pixels, int height, int width, int quality) {
  return tj_encode(pixels, height, width, TJPF_GRAY, TJSAMP_GRAY, quality);
}
std::string encode_png(const Image& image) {
  return png_encode(image.pixels.data(), image.height, image.width, PNG_FORMAT_RGB);
}
std::string encode_gray_png(const uint8_t* pixels, int height, int width) {
  return png_encode(pixels, height, width, PNG_FORMAT_GRAY);
}

}  // namespace orchard::data
