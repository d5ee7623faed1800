// Captioning data as im2txt (research/im2txt) defines it: captions tokenised into lowercase
// words wrapped in <S> ... </S>, the vocabulary file word_counts.txt ("word count" lines, most
// frequent first, words seen fewer than min_word_count times left out, <UNK> for the rest),
// tf.train.SequenceExample records (context image/image_id, image/data; feature_lists
// image/caption, image/caption_ids) and the image preprocessing of im2txt's
// ops/image_processing.py.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "orchard/data/image.h"

namespace orchard::data {

constexpr const char* kStartWord = "<S>";
constexpr const char* kEndWord = "</S>";
constexpr const char* kUnknownWord = "<UNK>";

// Lowercases and splits into words, with punctuation and English clitics as their own tokens
// ("A man's dog, running." -> a man 's dog , running .): the parts of NLTK's word_tokenize that
// im2txt's build_mscoco_data.py relies on, without NLTK.
std::vector<std::string> tokenize_caption(const std::string& caption);

// <S> + tokenize_caption(caption) + </S>, the form im2txt stores and counts.
std::vector<std::string> caption_tokens(const std::string& caption);

struct WordCount {
  std::string word;
  int64_t count = 0;
};

// Counts the words of tokenised captions (the <S> and </S> they carry included, as im2txt
// does), most frequent first; equal counts keep the order of first appearance (Python's stable
// sort over a Counter). Words seen fewer than min_count times are left out.
std::vector<WordCount> count_words(const std::vector<std::vector<std::string>>& captions, int64_t min_count);

// Writes word_counts.txt atomically.
void write_word_counts(const std::string& path, const std::vector<WordCount>& counts);

// im2txt's Vocabulary: ids are line numbers of word_counts.txt; <UNK> is the last id (appended
// when the file lacks it). The file must contain <S> and </S>.
class Vocabulary {
 public:
  Vocabulary() = default;
  explicit Vocabulary(std::vector<std::string> words);  // in id order; <UNK> appended if absent
  static Vocabulary load(const std::string& path);      // throws DataError naming the file and line

  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  int64_t id(const std::string& word) const;  // unknown_id() for words not in the vocabulary
  const std::string& word(int64_t id) const;  // throws Error for an id outside [0, size)
  int64_t start_id() const { return start_id_; }
  int64_t end_id() const { return end_id_; }
  int64_t unknown_id() const { return unknown_id_; }
  std::vector<int64_t> ids(const std::vector<std::string>& words) const;
  // The words of a generated id sequence without <S> and </S> (im2txt's run_inference), space-joined.
  std::string sentence(const std::vector<int64_t>& ids) const;

 private:
  std::vector<std::string> words_;
  std::unordered_map<std::string, int64_t> index_;
  int64_t start_id_ = -1, end_id_ = -1, unknown_id_ = -1;
};

// One (image, caption) pair, the unit of im2txt's records.
struct CaptionExample {
  int64_t image_id = 0;
  std::string encoded;              // image/data: JPEG (or PNG) bytes
  std::vector<std::string> tokens;  // image/caption: <S> ... </S>
  std::vector<int64_t> ids;         // image/caption_ids: the same, as vocabulary ids
};

// A serialized tf.train.SequenceExample in im2txt's schema (deterministic bytes).
std::string make_caption_example(const CaptionExample& example);
// Parses one; DataError names `source` and the missing or mistyped feature. Tokens are read
// when present (they are optional for training); ids must have at least 2 entries.
CaptionExample parse_caption_example(const std::string& serialized, const std::string& source);

// An image with its captions (token lists with <S> and </S>), before records are written.
struct CaptionedImage {
  int64_t image_id = 0;
  std::string encoded;
  std::vector<std::vector<std::string>> captions;
};

// The vocabulary of counted words (count_words's order), <UNK> appended.
Vocabulary vocabulary_from_counts(const std::vector<WordCount>& counts);

// (image, caption) index pairs of every caption, in a random order fixed by `seed` (im2txt
// shuffles its pairs before sharding, so neighbouring records rarely share an image).
std::vector<std::pair<size_t, size_t>> shuffled_caption_pairs(const std::vector<size_t>& captions_per_image,
                                                              uint64_t seed);

// One record per (image, caption) in shuffled_caption_pairs order, ids from `vocab`.
std::vector<std::string> make_caption_records(const std::vector<CaptionedImage>& images, const Vocabulary& vocab,
                                              uint64_t seed);

// im2txt's image preprocessing: decode, bilinear resize to resize_size x resize_size, then
// training: a random image_size crop, a random horizontal flip and colour distortion
// (brightness 32/255, saturation [0.5, 1.5], hue 0.032, contrast [0.5, 1.5] in one of two
// orders, clipped to [0, 1]); eval: the central crop. Scaled to [-1, 1]; `out` is
// [3, image_size, image_size].
struct CaptionImageOptions {
  int image_size = 299;
  int resize_size = 346;  // im2txt: 346 for 299; scale it with image_size for smaller inputs
  bool distort = true;    // colour distortion in training
  int64_t max_image_pixels = kDefaultMaxImagePixels;  // larger images are data errors (image.h)
};
void preprocess_caption_image(const std::string& encoded, const CaptionImageOptions& options, bool training,
                              std::mt19937_64& rng, float* out, const std::string& what);

// The colour distortion alone, in place on float RGB [h * w * 3] in [0, 1]; `order` 0 is
// brightness, saturation, hue, contrast; 1 is brightness, contrast, saturation, hue.
void distort_colors(float* rgb, int height, int width, int order, std::mt19937_64& rng);

}  // namespace orchard::data
