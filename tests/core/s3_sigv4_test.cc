// SigV4 against AWS's published vectors (values written here, source named with
// each), and the credential chain over a fake environment and temporary ~/.aws
// files.
#include "orchard/core/s3_sigv4.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/test_util.h"
#include "orchard/core/s3_client.h"

namespace orchard::s3 {
namespace {

const std::string kEmptySha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// The AWS Signature Version 4 test suite (aws-sig-v4-test-suite, as copied into
// botocore's tests/unit/auth/aws4_testsuite, Apache-2.0): credentials
// AKIDEXAMPLE / wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1,
// service "service", 20150830T123600Z. Only the published signatures are used.
const SigV4Key kSuiteKey{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"};

TEST(SigV4, TestSuiteGetVanilla) {
  SigV4Request r{"GET", "/", {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}}, kEmptySha};
  const auto s = sign_v4(r, kSuiteKey, "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 "
            "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature="
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4, TestSuiteQueryOrderKeyCase) {
  // get-vanilla-query-order-key-case: ?Param2=value2&Param1=value1, sorted
  // before signing.
  SigV4Request r{"GET",
                 "/",
                 {{"Param2", "value2"}, {"Param1", "value1"}},
                 {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                 kEmptySha};
  EXPECT_EQ(sign_v4(r, kSuiteKey, "us-east-1", "service", "20150830T123600Z").signature,
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

// Amazon S3 API Reference, "Signature Calculations for the Authorization
// Header: Transferring Payload in a Single Chunk (AWS Signature Version 4)",
// its four examples: AKIAIOSFODNN7EXAMPLE /
// wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, us-east-1, s3, 20130524T000000Z,
// examplebucket.
const SigV4Key kS3DocKey{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
const std::string kDate = "20130524T000000Z";
const std::string kHost = "examplebucket.s3.amazonaws.com";

TEST(SigV4, S3DocGetObjectWithRange) {
  SigV4Request r{"GET",
                 "/test.txt",
                 {},
                 {{"Host", kHost}, {"Range", "bytes=0-9"}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
                 kEmptySha};
  const auto s = sign_v4(r, kS3DocKey, "us-east-1", "s3", kDate);
  EXPECT_EQ(sha256_hex(s.canonical_request), "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4, S3DocPutObject) {
  // PUT /test$file.text: '$' is not unreserved, so the key is encoded in the
  // canonical URI.
  const std::string body = "Welcome to Amazon S3.";
  EXPECT_EQ(uri_encode("/test$file.text", true), "/test%24file.text");
  SigV4Request r{"PUT",
                 uri_encode("/test$file.text", true),
                 {},
                 {{"Host", kHost},
                  {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                  {"x-amz-content-sha256", sha256_hex(body)},
                  {"x-amz-date", kDate},
                  {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                 sha256_hex(body)};
  const auto s = sign_v4(r, kS3DocKey, "us-east-1", "s3", kDate);
  EXPECT_EQ(sha256_hex(s.canonical_request), "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4, S3DocGetBucketLifecycle) {
  SigV4Request r{"GET",
                 "/",
                 {{"lifecycle", ""}},
                 {{"Host", kHost}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
                 kEmptySha};
  EXPECT_EQ(sign_v4(r, kS3DocKey, "us-east-1", "s3", kDate).signature,
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4, S3DocListObjects) {
  SigV4Request r{"GET",
                 "/",
                 {{"prefix", "J"}, {"max-keys", "2"}},
                 {{"Host", kHost}, {"x-amz-content-sha256", kEmptySha}, {"x-amz-date", kDate}},
                 kEmptySha};
  const auto s = sign_v4(r, kS3DocKey, "us-east-1", "s3", kDate);
  EXPECT_EQ(sha256_hex(s.canonical_request), "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, UriEncoding) {
  EXPECT_EQ(uri_encode("a b/c~d_e.f-g", true), "a%20b/c~d_e.f-g");
  EXPECT_EQ(uri_encode("a b/c", false), "a%20b%2Fc");
  EXPECT_EQ(uri_encode("\xc3\xa9=+", false), "%C3%A9%3D%2B");
  EXPECT_EQ(canonical_query({{"b", "x y"}, {"a", "1/2"}, {"continuation-token", "t=="}}),
            "a=1%2F2&b=x%20y&continuation-token=t%3D%3D");
}

// --- the credential chain
// -------------------------------------------------------------

class CredentialChain : public ::testing::Test {
 protected:
  test::TempDir home;
  std::map<std::string, std::string> env{{"HOME", home.str()}};
  Credentials find(std::string* region = nullptr) {
    return find_credentials(
        [this](const std::string& k) -> std::optional<std::string> {
          auto it = env.find(k);
          if (it == env.end()) return std::nullopt;
          return it->second;
        },
        region);
  }
  void write(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(home.path() / ".aws");
    std::ofstream(home.file(".aws/" + name)) << text;
  }
};

TEST_F(CredentialChain, EnvironmentFirst) {
  write("credentials",
        "[default]\naws_access_key_id = "
        "FILEKEY\naws_secret_access_key = filesecret\n");
  env["AWS_ACCESS_KEY_ID"] = "ENVKEY";
  env["AWS_SECRET_ACCESS_KEY"] = "envsecret";
  env["AWS_SESSION_TOKEN"] = "token";
  const Credentials c = find();
  EXPECT_EQ(c.access_key_id, "ENVKEY");
  EXPECT_EQ(c.secret_access_key, "envsecret");
  EXPECT_EQ(c.session_token, "token");
  EXPECT_NE(c.source.find("AWS_SESSION_TOKEN"), std::string::npos);
}

TEST_F(CredentialChain, ProfileInCredentialsFileThenConfig) {
  write("credentials",
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = s1\n"
        "[work]\naws_access_key_id = WORK\naws_secret_access_key = "
        "s2\naws_session_token = t2\n");
  write("config",
        "[profile work]\nregion = eu-west-3\n[profile cfg]\naws_access_key_id "
        "= CFG\naws_secret_access_key = s3\n");
  Credentials c = find();
  EXPECT_EQ(c.access_key_id, "DEF");
  env["AWS_PROFILE"] = "work";
  std::string region;
  c = find(&region);
  EXPECT_EQ(c.access_key_id, "WORK");
  EXPECT_EQ(c.session_token, "t2");
  EXPECT_EQ(region, "eu-west-3");
  EXPECT_NE(c.source.find("\"work\""), std::string::npos) << c.source;
  env["AWS_PROFILE"] = "cfg";
  c = find();
  EXPECT_EQ(c.access_key_id, "CFG");
  EXPECT_NE(c.source.find("[profile cfg]"), std::string::npos) << c.source;
}

TEST_F(CredentialChain, NoneIsAnonymousAndSaysWhereItLooked) {
  const Credentials c = find();
  EXPECT_TRUE(c.anonymous());
  ASSERT_EQ(c.looked_at.size(), 3u);
  EXPECT_NE(c.looked_at[1].find(home.str() + "/.aws/credentials"), std::string::npos);
  EXPECT_NE(c.looked_at[2].find(home.str() + "/.aws/config"), std::string::npos);
}

}  // namespace
}  // namespace orchard::s3
