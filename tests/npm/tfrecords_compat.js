#!/usr/bin/env node
// Cross-checks Orchard's TFRecord + tf.train.Example I/O against @roboflow/tfrecords, an
// independent JavaScript implementation (its own CRC-32C, framing and protobuf code).
//
//   node tfrecords_compat.js write OUT   writes kRecords tf.train.Example records to OUT
//   node tfrecords_compat.js read IN     prints the records of IN as one JSON document:
//     {"count": N, "records": [{"<key>": {"kind": "bytes"|"int64"|"float", "values": [...]}}]}
//     bytes values are lower-case hex strings.
//
// The values written by `write` are documented here and repeated in
// tests/core/npm_compat_test.cc; change both together.
//   record i (0-based, i < 3):
//     "name"  String  "record-<i>"
//     "blob"  Binary  [i, 0, 255, 128, 10, 13] (bytes that are not text)
//     "ids"   Int64   [i, -7, 2^40]
//     "score" Float   [0.5 * i, -1.25, 3.0]
//
// Note: the package's getFeature/getArrayFeature read google-protobuf internals that
// google-protobuf >= 3.10 no longer has, so `read` goes through TFRecordsReader.toArray().
"use strict";

const fs = require("fs");
const { TFRecordsBuilder, FeatureType } = require("@roboflow/tfrecords");
const { TFRecordsReader } = require("@roboflow/tfrecords/src/tensorFlowReader");

const kRecords = 3;

function write(out) {
  const records = [];
  for (let i = 0; i < kRecords; ++i) {
    const b = new TFRecordsBuilder();
    b.addFeature("name", FeatureType.String, `record-${i}`);
    b.addFeature("blob", FeatureType.Binary, Uint8Array.from([i, 0, 255, 128, 10, 13]));
    b.addArrayFeature("ids", FeatureType.Int64, [i, -7, 2 ** 40]);
    b.addArrayFeature("score", FeatureType.Float, [0.5 * i, -1.25, 3.0]);
    records.push(b.build());
  }
  fs.writeFileSync(out, TFRecordsBuilder.buildTFRecords(records));
}

function read(input) {
  const reader = new TFRecordsReader(fs.readFileSync(input));
  const records = reader.toArray().map((message) => {
    const out = {};
    for (const [key, feature] of message.context.featureMap) {
      if (feature.bytesList) {
        out[key] = {
          kind: "bytes",
          values: feature.bytesList.valueList.map((b64) => Buffer.from(b64, "base64").toString("hex")),
        };
      } else if (feature.int64List) {
        out[key] = { kind: "int64", values: feature.int64List.valueList };
      } else if (feature.floatList) {
        out[key] = { kind: "float", values: feature.floatList.valueList };
      } else {
        out[key] = { kind: "empty", values: [] };
      }
    }
    return out;
  });
  process.stdout.write(JSON.stringify({ count: reader.length, records }) + "\n");
}

function main(argv) {
  const [mode, path] = argv;
  if (mode === "write" && path) return write(path);
  if (mode === "read" && path) return read(path);
  process.stderr.write("usage: tfrecords_compat.js write OUT | read IN\n");
  process.exit(2);
}

main(process.argv.slice(2));
