#include "meta/fsck.h"

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <rocksdb/db.h>

#include "meta/codec.h"
#include "meta/layout.h"
#include "meta/rocks_options.h"
#include "meta/txn.h"

namespace weft::meta {
namespace {

struct Dentry {
  Ino parent;
  std::string name;
  DentryValue value;
};

struct Session {
  Ino ino;
  uint64_t id;
  std::optional<SessionValue> value;  // nullopt: undecodable
};

struct Namespace {
  std::map<Ino, Inode> inodes;
  std::map<Ino, DirStat> dir_stats;
  std::vector<Dentry> dentries;
  std::set<Ino> sessions, gc, xattrs;
  std::vector<Session> session_rows;
  int64_t inode_counter = 0;
  std::optional<uint64_t> next_id;  // Mnext_ino: ids (inodes, sessions) below it were handed out
};

std::string_view view(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

void load_row(Namespace& ns, std::string_view k, std::string_view v, std::vector<std::string>& problems) {
  auto ino = key::u64_at(k, 1);
  auto bad = [&](const Status& s) { problems.push_back(fmt::format("key {:?}: {}", k, s.to_string())); };
  if (k == key::kInodeCount) {
    auto n = decode_i64(v);
    n ? void(ns.inode_counter = *n) : bad(n.error());
    return;
  }
  if (k == key::kNextIno) {
    auto n = key::u64_at(v, 0);
    n ? void(ns.next_id = *n) : bad(n.error());
    return;
  }
  if (k.empty() || k[0] == 'M' || k[0] == 'R') return;
  if (!ino) return bad(ino.error());
  switch (k[0]) {
    case key::kInodePrefix: {
      auto n = decode_inode(v);
      if (!n) return bad(n.error());
      if (n->ino != *ino) return bad(Status(Code::kCorruption, "inode id mismatch"));
      ns.inodes[*ino] = *n;
      return;
    }
    case key::kDirStatPrefix: {
      auto s = decode_dir_stat(v);
      s ? void(ns.dir_stats[*ino] = *s) : bad(s.error());
      return;
    }
    case key::kDentryPrefix: {
      auto d = decode_dentry(v);
      if (!d) return bad(d.error());
      ns.dentries.push_back({*ino, std::string(k.substr(9)), *d});
      return;
    }
    case key::kSessionPrefix: {
      ns.sessions.insert(*ino);
      auto id = key::u64_at(k, 9);
      if (!id) return bad(id.error());
      auto s = decode_session(v);
      ns.session_rows.push_back({*ino, *id, s ? std::optional<SessionValue>(*s) : std::nullopt});
      return;
    }
    case key::kGcPrefix: {
      ns.gc.insert(*ino);
      auto n = decode_inode(v);
      if (!n) return bad(n.error());
      if (n->ino != *ino) bad(Status(Code::kCorruption, fmt::format("GC item of inode {} holds inode {}", *ino, n->ino)));
      return;
    }
    case 'X': ns.xattrs.insert(*ino); return;
    default: bad(Status(Code::kCorruption, "unknown key prefix"));
  }
}

void check_dentries(Namespace& ns, std::map<Ino, std::vector<const Dentry*>>& links,
                    std::vector<std::string>& p) {
  for (const Dentry& d : ns.dentries) {
    auto parent = ns.inodes.find(d.parent);
    if (parent == ns.inodes.end() || !parent->second.is_dir())
      p.push_back(fmt::format("dentry {}/{:?}: parent is not a live directory", d.parent, d.name));
    auto child = ns.inodes.find(d.value.ino);
    if (child == ns.inodes.end()) {
      p.push_back(fmt::format("dentry {}/{:?} names missing inode {}", d.parent, d.name, d.value.ino));
      continue;
    }
    if (child->second.type != d.value.type)
      p.push_back(fmt::format("dentry {}/{:?}: type differs from inode {}", d.parent, d.name, d.value.ino));
    links[d.value.ino].push_back(&d);
  }
}

void check_inodes(Namespace& ns, std::map<Ino, std::vector<const Dentry*>>& links, std::vector<std::string>& p) {
  std::map<Ino, int64_t> subdirs;
  for (const Dentry& d : ns.dentries)
    if (d.value.type == InodeType::kDirectory) subdirs[d.parent]++;
  for (auto& [ino, base] : ns.inodes) {
    const auto& ls = links[ino];
    if (base.is_dir()) {
      auto merged = apply_dir_stat(base, ns.dir_stats[ino]);
      int64_t want = 2 + subdirs[ino];
      if (!merged || merged->nlink != want)
        p.push_back(fmt::format("directory {}: nlink {} but {} expected", ino, merged ? merged->nlink : 0, want));
      size_t want_links = ino == kRootIno ? 0 : 1;
      if (ls.size() != want_links) p.push_back(fmt::format("directory {} has {} dentries", ino, ls.size()));
      if (ls.size() == 1 && ls[0]->parent != base.parent)
        p.push_back(fmt::format("directory {}: '..' is {} but it sits in {}", ino, base.parent, ls[0]->parent));
      if (ino == kRootIno && base.parent != kRootIno) p.push_back("root '..' is not root");
      continue;
    }
    if (base.nlink != ls.size())
      p.push_back(fmt::format("inode {}: nlink {} but {} dentries", ino, base.nlink, ls.size()));
    // Meta before 5a3ab3e took any length: such a file still works (clients
    // take lengths up to off_t's), but its GC and truncates span more chunk
    // indexes than kFileBytesMax bounds them to (meta/types.h).
    if (base.is_file() && base.size > kFileBytesMax)
      p.push_back(fmt::format("file {}: {} bytes, past the {}-byte maximum (truncate it to within)", ino, base.size,
                              kFileBytesMax));
    if (base.is_file())
      if (auto valid = validate_layout(base.layout); !valid)
        p.push_back(fmt::format("file {}: {} (no chunk of it can be placed)", ino, valid.error().message()));
    // Meta between 4602f0c and 15e7ff9 stored a target with a NUL byte (only
    // the native and Python APIs could send one); clients refuse such a
    // target, and an empty one, from readlink (kProtocol). (The codec refuses
    // one past kSymlinkBytesMax: a malformed inode.)
    if (base.is_symlink()) {
      const std::string& target = base.symlink_target;
      const bool nul = target.find('\0') != std::string::npos;
      if (target.empty() || nul)
        p.push_back(fmt::format("symlink {}: a target of {} bytes{} no readlink takes (make the link again)", ino,
                                target.size(), nul ? " holding a NUL byte" : ""));
    }
    // A mount answers "no xattrs" from the record without asking: a record
    // of none over xattrs hides them there.
    const bool has_xattrs = ns.xattrs.contains(ino);
    if (base.xattrs == XattrPresence::kNone && has_xattrs)
      p.push_back(fmt::format("inode {} records no xattrs but has some (mounts do not show them: set or remove one "
                              "to put the record right)", ino));
    if (base.xattrs == XattrPresence::kSome && !has_xattrs)
      p.push_back(fmt::format("inode {} records xattrs but has none", ino));
    if (ls.empty() && !(base.is_file() && base.nlink == 0 && ns.sessions.contains(ino)))
      p.push_back(fmt::format("orphan inode {} (nlink {}, no session)", ino, base.nlink));
    if (ns.gc.contains(ino)) p.push_back(fmt::format("inode {} is live and queued for GC", ino));
  }
}

void check_reachable(Namespace& ns, std::vector<std::string>& p) {
  std::unordered_map<Ino, std::vector<Ino>> children;
  for (const Dentry& d : ns.dentries)
    if (d.value.type == InodeType::kDirectory) children[d.parent].push_back(d.value.ino);
  std::set<Ino> seen{kRootIno};
  std::deque<Ino> todo{kRootIno};
  while (!todo.empty()) {
    Ino cur = todo.front();
    todo.pop_front();
    for (Ino c : children[cur])
      if (seen.insert(c).second) todo.push_back(c);
  }
  if (!ns.inodes.contains(kRootIno)) p.push_back("no root inode");
  for (auto& [ino, n] : ns.inodes)
    if (n.is_dir() && !seen.contains(ino)) p.push_back(fmt::format("directory {} unreachable from root", ino));
}

void check_side_tables(Namespace& ns, std::vector<std::string>& p) {
  for (Ino ino : ns.sessions)
    if (!ns.inodes.contains(ino)) p.push_back(fmt::format("session on missing inode {}", ino));
  // The session reaper closes a session whose client stopped renewing its
  // lease: one without a client (or unreadable) would be kept forever, and
  // its file with it.
  for (const Session& s : ns.session_rows) {
    if (!s.value) p.push_back(fmt::format("session {} of inode {} is unreadable", s.id, s.ino));
    else if (s.value->client_id == 0) p.push_back(fmt::format("session {} of inode {} has no client", s.id, s.ino));
    auto it = ns.inodes.find(s.ino);
    if (it != ns.inodes.end() && !it->second.is_file())
      p.push_back(fmt::format("session {} on inode {}, which is not a file", s.id, s.ino));
  }
  // Ids at or above the high-water mark would be handed out again after a
  // restart (a new file sharing an old one's chunks).
  const uint64_t limit = ns.next_id.value_or(kRootIno + 1);
  for (auto& [ino, n] : ns.inodes)
    if (ino >= limit) p.push_back(fmt::format("inode {} at or above the id high-water mark {}", ino, limit));
  for (const Session& s : ns.session_rows)
    if (s.id >= limit) p.push_back(fmt::format("session {} at or above the id high-water mark {}", s.id, limit));
  for (Ino ino : ns.gc)
    if (ino >= limit) p.push_back(fmt::format("GC item {} at or above the id high-water mark {}", ino, limit));
  for (Ino ino : ns.xattrs)
    if (!ns.inodes.contains(ino)) p.push_back(fmt::format("xattrs of missing inode {}", ino));
  for (auto& [ino, s] : ns.dir_stats) {
    auto it = ns.inodes.find(ino);
    if (it == ns.inodes.end() || !it->second.is_dir()) p.push_back(fmt::format("dir stat of non-directory {}", ino));
  }
  if (ns.inode_counter != static_cast<int64_t>(ns.inodes.size()))
    p.push_back(fmt::format("inode counter {} but {} inodes", ns.inode_counter, ns.inodes.size()));
}

}  // namespace

std::string FsckReport::summary() const {
  std::string s = fmt::format("{} inodes, {} dentries, {} sessions, {} queued for GC, {} problems", inodes,
                              dentries, sessions, gc_queued, problems.size());
  for (size_t i = 0; i < problems.size() && i < 20; ++i) s += "\n  " + problems[i];
  return s;
}

Result<FsckReport> fsck(rocksdb::DB& db) {
  FsckReport report;
  Namespace ns;
  rocksdb::ReadOptions ro;
  const rocksdb::Snapshot* snap = db.GetSnapshot();
  ro.snapshot = snap;
  {
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(ro));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (it->key().starts_with("S")) report.sessions++;
      load_row(ns, view(it->key()), view(it->value()), report.problems);
    }
    auto st = it->status();
    db.ReleaseSnapshot(snap);
    if (!st.ok()) return error(from_rocks(st, "fsck scan"));
  }
  std::map<Ino, std::vector<const Dentry*>> links;
  check_dentries(ns, links, report.problems);
  check_inodes(ns, links, report.problems);
  check_reachable(ns, report.problems);
  check_side_tables(ns, report.problems);
  report.inodes = ns.inodes.size();
  report.dentries = ns.dentries.size();
  report.gc_queued = ns.gc.size();
  return report;
}

Result<FsckReport> fsck_store_at(const std::string& path) {
  if (!std::filesystem::exists(std::filesystem::path(path) / "CURRENT"))
    return error(Code::kNotFound, "no meta store at {} (expected a RocksDB directory: [meta] data_dir/store)", path);
  rocksdb::DB* raw = nullptr;
  auto s = rocksdb::DB::OpenForReadOnly(store_rocks_options(), path, &raw);
  if (!s.ok()) return error(from_rocks(s, "open meta store " + path + " read-only"));
  std::unique_ptr<rocksdb::DB> db(raw);
  return fsck(*db);
}

}  // namespace weft::meta
