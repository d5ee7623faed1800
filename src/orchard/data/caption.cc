#include "orchard/data/caption.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "orchard/core/error.h"
#include "orchard/core/files.h"
#include "orchard/data/example.h"
#include "orchard/data/image.h"
#include "orchard/proto/example.pb.h"

namespace orchard::data {
namespace {

bool is_punctuation(char c) {
  static const std::string kPunct = ".,!?;:\"()[]{}`";
  return kPunct.find(c) != std::string::npos;
}

// Splits an English clitic off a lowercase word: "man's" -> man 's, "don't" -> do n't.
void push_word(std::string word, std::vector<std::string>* out) {
  if (word.empty()) return;
  static const char* kClitics[] = {"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"};
  for (const char* clitic : kClitics) {
    const std::string c = clitic;
    if (word.size() > c.size() && word.compare(word.size() - c.size(), c.size(), c) == 0) {
      out->push_back(word.substr(0, word.size() - c.size()));
      out->push_back(c);
      return;
    }
  }
  // Quotes around a word are punctuation of their own.
  if (word.size() > 1 && word.front() == '\'') {
    out->push_back("'");
    word.erase(0, 1);
  }
  if (word.size() > 1 && word.back() == '\'') {
    word.pop_back();
    out->push_back(word);
    out->push_back("'");
    return;
  }
  out->push_back(word);
}

float uniform(std::mt19937_64& rng, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(rng() >> 40) * 0x1p-24f;
}

// tf.image.rgb_to_hsv / hsv_to_rgb on one pixel, components in [0, 1].
void rgb_to_hsv(float r, float g, float b, float* h, float* s, float* v) {
  const float mx = std::max({r, g, b}), mn = std::min({r, g, b}), delta = mx - mn;
  *v = mx;
  *s = mx > 0 ? delta / mx : 0.0f;
  float hue = 0;
  if (delta > 0) {
    if (mx == r) hue = (g - b) / delta;
    else if (mx == g) hue = 2.0f + (b - r) / delta;
    else hue = 4.0f + (r - g) / delta;
    hue /= 6.0f;
    if (hue < 0) hue += 1.0f;
  }
  *h = hue;
}

void hsv_to_rgb(float h, float s, float v, float* r, float* g, float* b) {
  const float h6 = (h - std::floor(h)) * 6.0f;
  const int sector = std::min(5, static_cast<int>(h6));
  const float f = h6 - static_cast<float>(sector);
  const float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  switch (sector) {
    case 0: *r = v, *g = t, *b = p; break;
    case 1: *r = q, *g = v, *b = p; break;
    case 2: *r = p, *g = v, *b = t; break;
    case 3: *r = p, *g = q, *b = v; break;
    case 4: *r = t, *g = p, *b = v; break;
    default: *r = v, *g = p, *b = q; break;
  }
}

void adjust_brightness(float* rgb, size_t n, float delta) {
  for (size_t i = 0; i < n; ++i) rgb[i] += delta;
}

void adjust_contrast(float* rgb, size_t pixels, float factor) {
  for (int c = 0; c < 3; ++c) {
    double mean = 0;
    for (size_t i = 0; i < pixels; ++i) mean += rgb[3 * i + c];
    mean /= static_cast<double>(std::max<size_t>(pixels, 1));
    for (size_t i = 0; i < pixels; ++i) rgb[3 * i + c] = static_cast<float>((rgb[3 * i + c] - mean) * factor + mean);
  }
}

// Saturation factor and hue shift in one HSV round trip (each alone when the other is neutral).
void adjust_hsv(float* rgb, size_t pixels, float saturation, float hue_delta) {
  for (size_t i = 0; i < pixels; ++i) {
    float h, s, v;
    rgb_to_hsv(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], &h, &s, &v);
    s = std::clamp(s * saturation, 0.0f, 1.0f);
    h += hue_delta;
    h -= std::floor(h);
    hsv_to_rgb(h, s, v, &rgb[3 * i], &rgb[3 * i + 1], &rgb[3 * i + 2]);
  }
}

}  // namespace

std::vector<std::string> tokenize_caption(const std::string& caption) {
  std::vector<std::string> out;
  std::string word;
  for (char ch : caption) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (std::isspace(static_cast<unsigned char>(c))) {
      push_word(word, &out);
      word.clear();
    } else if (is_punctuation(c)) {
      push_word(word, &out);
      word.clear();
      out.emplace_back(1, c);
    } else {
      word += c;
    }
  }
  push_word(word, &out);
  return out;
}

std::vector<std::string> caption_tokens(const std::string& caption) {
  std::vector<std::string> tokens{kStartWord};
  for (auto& w : tokenize_caption(caption)) tokens.push_back(std::move(w));
  tokens.emplace_back(kEndWord);
  return tokens;
}

std::vector<WordCount> count_words(const std::vector<std::vector<std::string>>& captions, int64_t min_count) {
  std::vector<WordCount> counts;
  std::unordered_map<std::string, size_t> index;
  for (const auto& caption : captions)
    for (const auto& w : caption) {
      auto [it, inserted] = index.emplace(w, counts.size());
      if (inserted) counts.push_back({w, 0});
      ++counts[it->second].count;
    }
  counts.erase(std::remove_if(counts.begin(), counts.end(), [&](const WordCount& c) { return c.count < min_count; }),
               counts.end());
  std::stable_sort(counts.begin(), counts.end(),
                   [](const WordCount& a, const WordCount& b) { return a.count > b.count; });
  return counts;
}

void write_word_counts(const std::string& path, const std::vector<WordCount>& counts) {
  std::string text;
  for (const auto& c : counts) text += c.word + " " + std::to_string(c.count) + "\n";
  atomic_write_file(path, text);
}

Vocabulary::Vocabulary(std::vector<std::string> words) : words_(std::move(words)) {
  for (size_t i = 0; i < words_.size(); ++i) index_.emplace(words_[i], static_cast<int64_t>(i));
  if (!index_.count(kUnknownWord)) {
    index_.emplace(kUnknownWord, static_cast<int64_t>(words_.size()));
    words_.emplace_back(kUnknownWord);
  }
  if (!index_.count(kStartWord) || !index_.count(kEndWord))
    throw DataError(std::string("vocabulary has no ") + (index_.count(kStartWord) ? kEndWord : kStartWord) +
                    " (word_counts.txt must contain the start and end words)");
  start_id_ = index_.at(kStartWord);
  end_id_ = index_.at(kEndWord);
  unknown_id_ = index_.at(kUnknownWord);
}

Vocabulary Vocabulary::load(const std::string& path) {
  std::istringstream in;
  try {
    in.str(read_file(path));
  } catch (const Error& e) {
    throw DataError(path + ": cannot read the vocabulary file (" + e.what() + ")");
  }
  std::vector<std::string> words;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::istringstream ss(line);
    std::string word;
    if (!(ss >> word)) continue;  // blank line
    words.push_back(word);
  }
  if (words.empty()) throw DataError(path + ": empty vocabulary file (expected 'word count' lines)");
  try {
    return Vocabulary(std::move(words));
  } catch (const DataError& e) {
    throw DataError(path + ": " + e.what());
  }
}

int64_t Vocabulary::id(const std::string& w) const {
  auto it = index_.find(w);
  return it == index_.end() ? unknown_id_ : it->second;
}

const std::string& Vocabulary::word(int64_t id) const {
  if (id < 0 || id >= size())
    throw Error("word id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(size()) + ")");
  return words_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocabulary::ids(const std::vector<std::string>& words) const {
  std::vector<int64_t> out;
  out.reserve(words.size());
  for (const auto& w : words) out.push_back(id(w));
  return out;
}

std::string Vocabulary::sentence(const std::vector<int64_t>& ids) const {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if ((i == 0 && ids[i] == start_id_) || ids[i] == end_id_) continue;
    if (!s.empty()) s += ' ';
    s += word(ids[i]);
  }
  return s;
}

std::string make_caption_example(const CaptionExample& e) {
  tensorflow::SequenceExample seq;
  auto* context = seq.mutable_context();
  set_int64s(context, "image/image_id", {e.image_id});
  set_bytes(context, "image/data", e.encoded);
  auto& lists = *seq.mutable_feature_lists()->mutable_feature_list();
  auto& caption = lists["image/caption"];
  for (const auto& t : e.tokens) caption.add_feature()->mutable_bytes_list()->add_value(t);
  auto& ids = lists["image/caption_ids"];
  for (int64_t id : e.ids) ids.add_feature()->mutable_int64_list()->add_value(id);
  return serialize_deterministic(seq);
}

CaptionExample parse_caption_example(const std::string& serialized, const std::string& source) {
  tensorflow::SequenceExample seq;
  if (!seq.ParseFromString(serialized)) throw DataError(source + ": not a tf.train.SequenceExample");
  const ExampleView context(seq.context(), source);
  CaptionExample e;
  e.image_id = context.has("image/image_id") ? context.int64("image/image_id") : 0;
  e.encoded = context.bytes("image/data");
  const auto& lists = seq.feature_lists().feature_list();
  auto ids = lists.find("image/caption_ids");
  if (ids == lists.end()) throw DataError(source + ": feature list 'image/caption_ids' is missing");
  for (int i = 0; i < ids->second.feature_size(); ++i) {
    const auto& f = ids->second.feature(i);
    if (f.kind_case() != tensorflow::Feature::kInt64List || f.int64_list().value_size() != 1)
      throw DataError(source + ": 'image/caption_ids' entry " + std::to_string(i) + " is not one int64");
    e.ids.push_back(f.int64_list().value(0));
  }
  if (e.ids.size() < 2)
    throw DataError(source + ": 'image/caption_ids' has " + std::to_string(e.ids.size()) +
                    " ids; a caption needs at least the start and end words");
  auto tokens = lists.find("image/caption");
  if (tokens != lists.end())
    for (int i = 0; i < tokens->second.feature_size(); ++i) {
      const auto& f = tokens->second.feature(i);
      if (f.kind_case() != tensorflow::Feature::kBytesList || f.bytes_list().value_size() != 1)
        throw DataError(source + ": 'image/caption' entry " + std::to_string(i) + " is not one bytes value");
      e.tokens.push_back(f.bytes_list().value(0));
    }
  return e;
}

Vocabulary vocabulary_from_counts(const std::vector<WordCount>& counts) {
  std::vector<std::string> words;
  words.reserve(counts.size() + 1);
  for (const auto& c : counts) words.push_back(c.word);
  return Vocabulary(std::move(words));
}

std::vector<std::pair<size_t, size_t>> shuffled_caption_pairs(const std::vector<size_t>& captions_per_image,
                                                              uint64_t seed) {
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t i = 0; i < captions_per_image.size(); ++i)
    for (size_t j = 0; j < captions_per_image[i]; ++j) pairs.emplace_back(i, j);
  // Fisher-Yates on rng() alone (std::shuffle's algorithm differs between standard libraries).
  std::mt19937_64 rng(seed);
  for (size_t i = pairs.size(); i > 1; --i) std::swap(pairs[i - 1], pairs[rng() % i]);
  return pairs;
}

std::vector<std::string> make_caption_records(const std::vector<CaptionedImage>& images, const Vocabulary& vocab,
                                              uint64_t seed) {
  std::vector<size_t> counts;
  for (const auto& image : images) counts.push_back(image.captions.size());
  std::vector<std::string> records;
  for (const auto& [i, j] : shuffled_caption_pairs(counts, seed)) {
    CaptionExample e;
    e.image_id = images[i].image_id;
    e.encoded = images[i].encoded;
    e.tokens = images[i].captions[j];
    e.ids = vocab.ids(e.tokens);
    records.push_back(make_caption_example(e));
  }
  return records;
}

void distort_colors(float* rgb, int height, int width, int order, std::mt19937_64& rng) {
  const size_t pixels = static_cast<size_t>(height) * static_cast<size_t>(width);
  adjust_brightness(rgb, pixels * 3, uniform(rng, -32.0f / 255.0f, 32.0f / 255.0f));
  // Saturation and hue are adjacent in both orders, so one HSV round trip does the two.
  if (order != 0) adjust_contrast(rgb, pixels, uniform(rng, 0.5f, 1.5f));
  const float saturation = uniform(rng, 0.5f, 1.5f);
  adjust_hsv(rgb, pixels, saturation, uniform(rng, -0.032f, 0.032f));
  if (order == 0) adjust_contrast(rgb, pixels, uniform(rng, 0.5f, 1.5f));
  for (size_t i = 0; i < pixels * 3; ++i) rgb[i] = std::clamp(rgb[i], 0.0f, 1.0f);
}

void preprocess_caption_image(const std::string& encoded, const CaptionImageOptions& o, bool training,
                              std::mt19937_64& rng, float* out, const std::string& what) {
  if (o.image_size < 1 || o.resize_size < o.image_size)
    throw Error("caption image: resize size " + std::to_string(o.resize_size) + " must be >= image size " +
                std::to_string(o.image_size));
  Image image = decode_image(encoded, what, o.max_image_pixels);
  cv::Mat src(image.height, image.width, CV_8UC3, image.pixels.data());
  cv::Mat resized;
  cv::resize(src, resized, cv::Size(o.resize_size, o.resize_size), 0, 0, cv::INTER_LINEAR);
  const int span = o.resize_size - o.image_size;
  int y0 = span / 2, x0 = span / 2;  // tf.image.resize_image_with_crop_or_pad: the centre
  bool flip = false;
  if (training) {
    y0 = static_cast<int>(rng() % static_cast<uint64_t>(span + 1));
    x0 = static_cast<int>(rng() % static_cast<uint64_t>(span + 1));
    flip = (rng() >> 63) != 0;
  }
  const int s = o.image_size;
  std::vector<float> rgb(static_cast<size_t>(s) * s * 3);
  for (int y = 0; y < s; ++y) {
    const uint8_t* row = resized.ptr<uint8_t>(y0 + y);
    for (int x = 0; x < s; ++x) {
      const int sx = x0 + (flip ? s - 1 - x : x);
      for (int c = 0; c < 3; ++c) rgb[(static_cast<size_t>(y) * s + x) * 3 + c] = row[sx * 3 + c] / 255.0f;
    }
  }
  if (training && o.distort) distort_colors(rgb.data(), s, s, static_cast<int>(rng() >> 63), rng);
  const size_t plane = static_cast<size_t>(s) * s;
  for (size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) out[c * plane + i] = (rgb[i * 3 + c] - 0.5f) * 2.0f;
}

}  // namespace orchard::data
