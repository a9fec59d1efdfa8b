// Thrift forwarder on Apache Thrift's own C++ library: the framework way to write Slick's
// forwarder (seed 002, section 3.3). The code for the Forwarder service is generated at build
// time by the thrift compiler from examples/thrift/forwarder.thrift (build.sh).
//
// A TNonblockingServer (framed transport, binary protocol, one I/O thread and no worker
// threads, so messages from one client keep their order) whose handler msg(key, payload)
// sends the message on to destination key mod N (Euclidean) through one ForwarderClient per
// destination (framed transport over a blocking socket). A destination's client is opened
// with the first message for it (the destinations may start after the forwarder) and opened
// again after it breaks; the message that met the break is reported on stderr and dropped.
//
// The forwarder's contract is to pass every message on byte for byte, and the generated client
// always writes sequence id 0: so the processor notes each call's sequence id for the handler
// and the client writes it back, with the generated argument struct (everything else is the
// generated code's own path).
//
// Usage: thrift_forward PORT DEST_HOST:PORT [DEST_HOST:PORT...]   (listens on 127.0.0.1)

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TNonblockingServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TNonblockingServerSocket.h>
#include <thrift/transport/TSocket.h>

#include "Forwarder.h"

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TNonblockingServer;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TNonblockingServerSocket;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;

namespace {

// ForwarderClient::send_msg with the sequence id given instead of 0.
class SeqidClient : public ForwarderClient {
public:
  using ForwarderClient::ForwarderClient;

  void send_msg(int32_t seqid, const int32_t key, const std::string& payload) {
    oprot_->writeMessageBegin("msg", apache::thrift::protocol::T_ONEWAY, seqid);
    Forwarder_msg_pargs args;
    args.key = &key;
    args.payload = &payload;
    args.write(oprot_);
    oprot_->writeMessageEnd();
    oprot_->getTransport()->writeEnd();
    oprot_->getTransport()->flush();
  }
};

struct Destination {
  std::string host;
  int port;
  std::shared_ptr<TFramedTransport> transport;
  std::unique_ptr<SeqidClient> client;
};

class ForwarderHandler : public ForwarderIf {
public:
  explicit ForwarderHandler(std::vector<Destination> dests) : dests_(std::move(dests)) {}

  // The sequence id of the call being handled (one I/O thread: no race).
  int32_t seqid = 0;

  void msg(const int32_t key, const std::string& payload) override {
    const int64_t n = static_cast<int64_t>(dests_.size());
    int64_t m = static_cast<int64_t>(key) % n;
    if (m < 0) m += n;
    Destination& d = dests_[static_cast<size_t>(m)];
    try {
      if (!d.client) {
        auto socket = std::make_shared<TSocket>(d.host, d.port);
        socket->setNoDelay(true);
        d.transport = std::make_shared<TFramedTransport>(socket);
        d.client.reset(new SeqidClient(std::make_shared<TBinaryProtocol>(d.transport)));
        d.transport->open();
      }
      d.client->send_msg(seqid, key, payload);
    } catch (const TTransportException& e) {
      std::cerr << "thrift_forward: destination " << d.host << ":" << d.port << ": "
                << e.what() << "; message dropped" << std::endl;
      d.client.reset();
      if (d.transport) {
        try {
          d.transport->close();
        } catch (...) {
        }
        d.transport.reset();
      }
    }
  }

private:
  std::vector<Destination> dests_;
};

// The generated processor, noting each call's sequence id for the handler.
class SeqidProcessor : public ForwarderProcessor {
public:
  explicit SeqidProcessor(std::shared_ptr<ForwarderHandler> handler)
    : ForwarderProcessor(handler), handler_(std::move(handler)) {}

protected:
  bool dispatchCall(apache::thrift::protocol::TProtocol* iprot,
                    apache::thrift::protocol::TProtocol* oprot, const std::string& fname,
                    int32_t seqid, void* callContext) override {
    handler_->seqid = seqid;
    return ForwarderProcessor::dispatchCall(iprot, oprot, fname, seqid, callContext);
  }

private:
  std::shared_ptr<ForwarderHandler> handler_;
};

bool parse_port(const std::string& s, int* port) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 1 || v > 65535) return false;
  *port = static_cast<int>(v);
  return true;
}

int usage() {
  std::cerr << "usage: thrift_forward PORT DEST_HOST:PORT [DEST_HOST:PORT...]" << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  int port = 0;
  if (!parse_port(argv[1], &port)) {
    std::cerr << "thrift_forward: bad port " << argv[1] << std::endl;
    return 2;
  }
  std::vector<Destination> dests;
  for (int i = 2; i < argc; i++) {
    std::string arg = argv[i];
    size_t colon = arg.rfind(':');
    int dport = 0;
    if (colon == std::string::npos || colon == 0 || !parse_port(arg.substr(colon + 1), &dport)) {
      std::cerr << "thrift_forward: bad destination " << arg << " (want HOST:PORT)" << std::endl;
      return 2;
    }
    dests.push_back(Destination{arg.substr(0, colon), dport, nullptr, nullptr});
  }
  std::signal(SIGPIPE, SIG_IGN);

  auto handler = std::make_shared<ForwarderHandler>(std::move(dests));
  auto processor = std::make_shared<SeqidProcessor>(handler);
  auto socket = std::make_shared<TNonblockingServerSocket>("127.0.0.1", port);
  TNonblockingServer server(processor, std::make_shared<TBinaryProtocolFactory>(), socket);
  server.setNumIOThreads(1);
  try {
    server.serve();
  } catch (const std::exception& e) {
    std::cerr << "thrift_forward: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
