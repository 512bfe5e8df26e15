// The kv-store's gRPC face, in-process on port 0: the raw Get is valid protobuf for any client
// and parses back through kv_block_wire.h; errors map to the documented codes.
#include "services/kv-store/kv_store_server.h"

#include <xxhash.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/method_policy.h"
#include "common/metrics/registry.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "services/kv-store/kv_block_wire.h"

namespace moe::kv_store {
namespace {

namespace pb = ::moe::kv_store::v1;

std::string HashBytes(uint64_t i) {
  const std::array<uint8_t, 16> b = kv::BlockHash{i + 7, i * 31 + 1}.CanonicalBytes();
  return std::string(reinterpret_cast<const char*>(b.data()), 16);
}

// [layers, 2, tokens, heads, dim] f32 whose values depend on `i`.
pb::KvBlock Block(uint64_t i, const std::vector<int64_t>& dims = {2, 2, 4, 2, 8}) {
  pb::KvBlock b;
  b.set_hash(HashBytes(i));
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>(i) + 0.001f * static_cast<float>(k);
  b.mutable_data()->set_dtype(moe::common::v1::DTYPE_F32);
  for (int64_t d : dims) b.mutable_data()->add_shape(d);
  b.mutable_data()->set_data(std::string(reinterpret_cast<const char*>(v.data()), n * 4));
  b.set_checksum(XXH3_64bits(b.data().data().data(), b.data().data().size()));
  return b;
}

class KvStoreServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvStoreCoreOptions o;
    o.l3_dir = common::testing::MakeTempDir("kv_store_server");
    ASSERT_OK_AND_ASSIGN(core_, KvStoreCore::Create(o, registry_, common::SystemClock::Get()));
    service_ = std::make_unique<KvStoreServer>(*core_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    runner_ = std::make_unique<common::rpc::ServerRunner>(so);
    runner_->AddService(service_.get(), pb::KvStore::service_full_name());
    ASSERT_OK(runner_->Start());
    runner_->SetServing(true);
    ASSERT_OK_AND_ASSIGN(channel_,
                         common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port())));
    stub_ = pb::KvStore::NewStub(channel_);
  }
  void TearDown() override { runner_->Shutdown(); }

  void Put(const std::vector<pb::KvBlock>& blocks) {
    pb::PutRequest req;
    for (const auto& b : blocks) *req.add_blocks() = b;
    pb::PutResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Put(&ctx, req, &resp).ok());
  }

  common::metrics::Registry registry_;
  std::unique_ptr<KvStoreCore> core_;
  std::unique_ptr<KvStoreServer> service_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::KvStore::Stub> stub_;
};

TEST_F(KvStoreServerTest, RawGetIsTheProtobufEncodingOfGetResponse) {
  Put({Block(0), Block(1), Block(2)});
  pb::GetRequest req;
  for (uint64_t i : {0, 5, 2}) req.add_hashes(HashBytes(i));
  pb::GetResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Get(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.blocks_size(), 2);  // 5 is missing
  for (int k = 0; k < 2; ++k) {
    const pb::KvBlock want = Block(k == 0 ? 0 : 2);
    EXPECT_EQ(resp.blocks(k).hash(), want.hash());
    EXPECT_TRUE(resp.blocks(k).data().data() == want.data().data());
    EXPECT_EQ(resp.blocks(k).data().dtype(), moe::common::v1::DTYPE_F32);
    EXPECT_EQ(resp.blocks(k).data().shape_size(), 5);
    EXPECT_EQ(resp.blocks(k).checksum(), want.checksum());
    EXPECT_EQ(resp.blocks(k).tier(), pb::TIER_L2);
  }
  req.set_prefix_only(true);
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub_->Get(&ctx2, req, &resp).ok());
  EXPECT_EQ(resp.blocks_size(), 1);
}

// Collects what ParseGetResponse delivers.
class CollectingSink final : public WireBlockSink {
 public:
  struct Got {
    kv::BlockHash hash;
    std::string data;
    bool intact = false;
    int tier = 0;
  };
  bool BeginBlock(const kv::BlockHash& hash, common::DType, std::span<const int64_t>,
                  int64_t num_bytes, int tier) override {
    got.push_back({hash, std::string(num_bytes, '\0'), false, tier});
    return true;
  }
  void BlockData(int64_t offset, const uint8_t* data, size_t size) override {
    std::memcpy(got.back().data.data() + offset, data, size);
  }
  void EndBlock(bool intact) override { got.back().intact = intact; }
  std::vector<Got> got;
};

TEST_F(KvStoreServerTest, RawGetParsesBackThroughTheWireReaderAcrossSlices) {
  // Bench-preset-sized blocks (256 KiB each, 3 MiB in all): gRPC delivers them in many slices.
  const std::vector<int64_t> dims = {8, 2, 16, 4, 64};
  std::vector<pb::KvBlock> blocks;
  for (uint64_t i = 0; i < 12; ++i) blocks.push_back(Block(i, dims));
  Put(blocks);
  pb::GetRequest req;
  for (uint64_t i = 0; i < 12; ++i) req.add_hashes(HashBytes(i));
  grpc::ByteBuffer request_buf, response_buf;
  {
    bool own;
    ASSERT_TRUE(grpc::SerializationTraits<pb::GetRequest>::Serialize(req, &request_buf, &own).ok());
  }
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/moe.kv_store.v1.KvStore/Get", grpc::StubOptions(), &request_buf,
                    &response_buf, [&](grpc::Status s) {
                      status = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  CollectingSink sink;
  ASSERT_OK(ParseGetResponse(response_buf, sink));
  ASSERT_EQ(sink.got.size(), 12u);
  for (uint64_t i = 0; i < 12; ++i) {
    EXPECT_TRUE(sink.got[i].intact);
    EXPECT_EQ(sink.got[i].tier, pb::TIER_L2);
    EXPECT_TRUE(sink.got[i].data == blocks[i].data().data()) << i;
  }
}

TEST_F(KvStoreServerTest, WireReaderFlagsACorruptBlockAndReadsStandardFieldOrder) {
  // A GetResponse serialized by protobuf itself (hash, data, checksum order), one checksum off.
  pb::GetResponse resp;
  *resp.add_blocks() = Block(1);
  *resp.add_blocks() = Block(2);
  resp.mutable_blocks(1)->set_checksum(resp.blocks(1).checksum() ^ 1);
  grpc::ByteBuffer buf;
  bool own;
  ASSERT_TRUE(grpc::SerializationTraits<pb::GetResponse>::Serialize(resp, &buf, &own).ok());
  CollectingSink sink;
  ASSERT_OK(ParseGetResponse(buf, sink));
  ASSERT_EQ(sink.got.size(), 2u);
  EXPECT_TRUE(sink.got[0].intact);
  EXPECT_FALSE(sink.got[1].intact);
  // Truncated bytes are DATA_LOSS.
  std::string bytes = resp.SerializeAsString();
  bytes.resize(bytes.size() - 10);
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer cut(&slice, 1);
  CollectingSink sink2;
  EXPECT_THAT(ParseGetResponse(cut, sink2), common::testing::StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(KvStoreServerTest, LookupStatsAndErrors) {
  Put({Block(0), Block(1)});
  pb::LookupRequest lr;
  for (uint64_t i : {0, 1, 2}) lr.add_hashes(HashBytes(i));
  pb::LookupResponse lresp;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->Lookup(&c1, lr, &lresp).ok());
  EXPECT_EQ(lresp.num_cached_blocks(), 2);
  EXPECT_EQ(lresp.num_in_l2(), 2);
  ASSERT_EQ(lresp.tiers_size(), 2);

  lr.set_fidelity(pb::KV_FIDELITY_LOSSY_INT8);
  grpc::ClientContext c2;
  EXPECT_EQ(stub_->Lookup(&c2, lr, &lresp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  pb::GetRequest bad;
  bad.add_hashes("short");
  pb::GetResponse gresp;
  grpc::ClientContext c3;
  EXPECT_EQ(stub_->Get(&c3, bad, &gresp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  pb::PutRequest put;
  *put.add_blocks() = Block(3);
  put.mutable_blocks(0)->set_checksum(1);
  pb::PutResponse presp;
  grpc::ClientContext c4;
  EXPECT_EQ(stub_->Put(&c4, put, &presp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  pb::StatsResponse stats;
  grpc::ClientContext c5;
  ASSERT_TRUE(stub_->Stats(&c5, pb::StatsRequest(), &stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_EQ(stats.tiers(0).tier(), pb::TIER_L2);
  EXPECT_EQ(stats.tiers(0).blocks_used(), 2);
  EXPECT_EQ(stats.fidelity(), pb::KV_FIDELITY_EXACT);
  EXPECT_EQ(stats.compression(), "zstd");
}

TEST_F(KvStoreServerTest, CachedResponsesRoundTrip) {
  pb::PutCachedResponseRequest put;
  put.set_key(HashBytes(9));
  put.set_value("value");
  pb::PutCachedResponseResponse presp;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->PutCachedResponse(&c1, put, &presp).ok());
  EXPECT_TRUE(presp.stored());
  pb::GetCachedResponseRequest get;
  get.set_key(HashBytes(9));
  pb::GetCachedResponseResponse gresp;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->GetCachedResponse(&c2, get, &gresp).ok());
  EXPECT_TRUE(gresp.found());
  EXPECT_EQ(gresp.value(), "value");
  get.set_key("x");
  grpc::ClientContext c3;
  EXPECT_EQ(stub_->GetCachedResponse(&c3, get, &gresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// mTLS with auth: only routers store and fetch; routers and the admin read stats; plaintext,
// certificate-less and foreign-CA callers never reach a handler (SECURITY.md).
TEST_F(KvStoreServerTest, EveryMethodServesOnlyItsRoles) {
  common::rpc::testing::ClusterPki pki(common::testing::MakeTempDir("kv_store_auth"));
  const common::rpc::ServerOptions grpc = pki.Server();
  ASSERT_OK_AND_ASSIGN(auto auth, common::rpc::Authorizer::Create(grpc.auth, "kv-store", registry_,
                                                                  common::SystemClock::Get()));
  KvStoreServer service(*core_);
  service.SetAuthorizer(*auth);
  common::rpc::ServerRunner runner(grpc);
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  const auto* descriptor = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::KvStore::service_full_name());
  ASSERT_NE(descriptor, nullptr);
  pki.ExpectEveryMethodGuarded(absl::StrCat("127.0.0.1:", runner.port()), *descriptor,
                               kKvStorePolicies);
  EXPECT_THAT(
      registry_.Value("moe_rpc_refused_total",
                      {{"service", "kv-store"}, {"method", "Get"}, {"code", "PERMISSION_DENIED"}}),
      common::testing::IsOkAndHolds(2.0));  // the gateway's and the admin's
  runner.Shutdown(absl::Now());
}

}  // namespace
}  // namespace moe::kv_store
