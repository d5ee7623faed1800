// The Oxford-IIIT Pets -> TF OD API detection records, as the OD API's
// dataset_tools/create_pet_tf_record.py writes them.
//
// Layout: data_dir/images/<name>.jpg, data_dir/annotations/trainval.txt (one "<name> ..." line
// per image), annotations/xmls/<name>.xml (PASCAL VOC's schema: one <object> per pet, its head's
// <bndbox>) and annotations/trimaps/<name>.png (1 pet, 2 background, 3 border).
//
// The records hold the fields of voc.h's records; the class is the breed, from the
// image's file name ("Abyssinian_12.jpg" -> Abyssinian, "american_pit_bull_terrier_105.jpg" ->
// american_pit_bull_terrier), one label per image. With faces_only (the default), each object's
// box is its head box from the xml. Without it, each object's box is the extent of the trimap's
// pixels that are not background (value != 2), max pixel index / size as the OD API computes it,
// and its instance mask is those pixels (trimap != 2): image/object/mask holds one single-channel
// 0/1 PNG per box (mask_type png, the OD API's PNG_MASKS, what Orchard reads) or one float list
// of all the masks, box after box, height x width row-major (mask_type numerical, the OD API's
// NUMERICAL_MASKS, which Orchard's reader refuses).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchard::data {

// The 37 breeds in the order of the OD API's data/pet_label_map.pbtxt (id = index + 1).
extern const std::vector<std::string> kPetClasses;

// The breed in an image file name: create_pet_tf_record.py's re.match(r'([A-Za-z_]+)(_[0-9]+\.jpg)',
// name, re.I) group 1. Empty when the name does not match.
std::string pet_class_from_filename(const std::string& file_name);

// Python 3's random.seed(seed); random.shuffle(items): MT19937 seeded by init_by_array([seed]),
// then Fisher-Yates from the end with getrandbits-based randbelow (CPython's
// _randbelow_with_getrandbits), so the order is the one create_pet_tf_record.py's random.seed(42)
// gives under Python 3 (Python 2's shuffle drew with random() and gives another order).
void python_random_shuffle(std::vector<std::string>* items, uint32_t seed);

struct PetsConvertOptions {
  std::string data_dir;
  std::string output_dir;
  // Empty: the 37 breeds, written as output_dir/pet_label_map.pbtxt (an existing file there must
  // hold the same bytes).
  std::string label_map_path;
  bool faces_only = true;
  std::string mask_type = "png";  // png | numerical (only without faces_only)
  int num_shards = 10;
};

struct PetsConvertResult {
  int64_t train = 0, validation = 0;  // records written
  int64_t missing_xml = 0;            // names in trainval.txt without an xml (skipped, as the OD API does)
  int64_t invalid = 0;                // skipped as the OD API skips them: an image that is not a JPEG, a trimap that is
                                      // not a PNG, a trimap without pet pixels (full-body boxes)
  std::string train_prefix, validation_prefix;  // output_dir/<name>.record, shards <prefix>-0000k-of-0000N
  std::string label_map_path;
};

// Reads trainval.txt, shuffles it as python_random_shuffle(42), takes the first int(0.7 * n)
// names for training and the rest for validation, and writes each split round-robin into
// num_shards shards (the name at position i of the split goes to shard i % num_shards, skipped
// names included, as create_pet_tf_record.py): pet_faces_{train,val}.record-0000k-of-0000N, or
// pets_fullbody_with_masks_{train,val}.record-... without faces_only. Errors (DataError) name the
// file and field: a missing image or trimap (when needed), an xml that does not parse, an object
// without <bndbox> (faces_only), a file name without a breed, a breed not in the label map, an
// image or trimap of another size than the xml's <size>.
PetsConvertResult convert_pets(const PetsConvertOptions& options);

}  // namespace orchard::data
