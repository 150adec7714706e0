#include "benchsuite/report.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "benchsuite/progress.h"

namespace weft::bench {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt::format("{}", std::round(v * 1e6) / 1e6);
}

// A figure for people: 3 significant digits, no exponent for usual ranges.
std::string show(double v) {
  if (!std::isfinite(v)) return "-";
  double a = std::fabs(v);
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  if (a >= 10) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string figures_json(const Figures& f) {
  std::string o = "{";
  bool first = true;
  for (const auto& [k, v] : f) {
    o += fmt::format("{}{}: {}", first ? "" : ", ", json_string(k), num(v));
    first = false;
  }
  return o + "}";
}

// Horizontal bars: each figure against its baseline, scaled per figure.
std::string bars_svg(const WorkloadResult& r) {
  const int row = r.has_baseline ? 44 : 26, label_w = 230, bar_w = 380, width = 760;
  int height = static_cast<int>(r.run.figures.size()) * row + 30;
  std::string o = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
                              width, height);
  o += fmt::format(R"(<rect x="{}" y="4" width="12" height="10" fill="#3b6fb6"/><text x="{}" y="13">{} ({})</text>)",
                   label_w, label_w + 16, html_escape(r.target), r.access);
  if (r.has_baseline)
    o += fmt::format(R"(<rect x="{}" y="4" width="12" height="10" fill="#aaa"/><text x="{}" y="13">baseline {}</text>)",
                     label_w + 300, label_w + 316, html_escape(r.baseline_path));
  int y = 24;
  for (const auto& [name, v] : r.run.figures) {
    double b = 0;
    bool has_b = false;
    if (r.has_baseline)
      if (auto it = r.baseline.figures.find(name); it != r.baseline.figures.end()) {
        b = it->second;
        has_b = true;
      }
    double mx = std::max({std::fabs(v), has_b ? std::fabs(b) : 0.0, 1e-12});
    int wv = static_cast<int>(std::fabs(v) / mx * bar_w);
    o += fmt::format(R"(<text x="0" y="{}">{}</text>)", y + 13, html_escape(name));
    o += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="16" fill="#3b6fb6"/><text x="{}" y="{}">{}</text>)",
                     label_w, y, std::max(wv, 1), label_w + std::max(wv, 1) + 4, y + 13, show(v));
    if (has_b) {
      int wb = static_cast<int>(std::fabs(b) / mx * bar_w);
      auto rt = r.ratios.find(name);
      std::string ratio = rt != r.ratios.end() ? fmt::format("  (ratio {})", show(rt->second)) : "";
      o += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="16" fill="#aaa"/><text x="{}" y="{}">{}{}</text>)",
                       label_w, y + 18, std::max(wb, 1), label_w + std::max(wb, 1) + 4, y + 31, show(b), ratio);
    }
    y += row;
  }
  return o + "</svg>";
}

// A line chart of one series over time with the W7 events marked.
std::string line_svg(const std::vector<TimelinePoint>& tl, const std::map<std::string, double>& events,
                     const std::string& title, double TimelinePoint::*field, const char* color) {
  const int width = 760, height = 240, left = 60, right = 20, top = 24, bottom = 34;
  double tmax = 1, vmax = 1e-9;
  for (const auto& p : tl) {
    tmax = std::max(tmax, p.t);
    vmax = std::max(vmax, p.*field);
  }
  if (auto it = events.find("end"); it != events.end()) tmax = std::max(tmax, it->second);
  vmax *= 1.1;
  auto X = [&](double t) { return left + t / tmax * (width - left - right); };
  auto Y = [&](double v) { return top + (1 - v / vmax) * (height - top - bottom); };
  std::string o = fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
                              width, height);
  o += fmt::format(R"(<text x="{}" y="14" font-weight="bold">{}</text>)", left, html_escape(title));
  o += fmt::format(R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#444"/><line x1="{0}" y1="{2}" x2="{3}" y2="{2}" stroke="#444"/>)",
                   left, top, height - bottom, width - right);
  for (int i = 0; i <= 4; ++i) {
    double v = vmax * i / 4;
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text><line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#eee"/>)",
                     left - 4, Y(v) + 4, show(v), left + 1, Y(v), width - right, Y(v));
  }
  int step = tmax > 60 ? 10 : 5;
  for (int t = 0; t <= static_cast<int>(tmax); t += step)
    o += fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle">{}s</text>)", X(t), height - bottom + 16, t);
  for (const auto& [name, t] : events) {
    if (name == "end") continue;
    const char* c = name == "kill" ? "#c0392b" : name == "restart" ? "#e67e22" : name == "serving" ? "#27ae60" : "#888";
    o += fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="{3}" stroke-dasharray="4,3"/><text x="{4:.1f}" y="{5}" fill="{3}">{6}</text>)",
                     X(t), top, height - bottom, c, X(t) + 3, top + 12 + (name == "restart" ? 14 : name == "serving" ? 28 : name == "offline" ? 42 : 0),
                     name);
  }
  std::string pts;
  for (const auto& p : tl) pts += fmt::format("{:.1f},{:.1f} ", X(p.t), Y(p.*field));
  o += fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>)", color, pts);
  return o + "</svg>";
}

}  // namespace

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"') o += "\\\"";
    else if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += static_cast<char>(c);
  }
  return o + "\"";
}

std::string describe_device(const std::string& path) {
  struct ::stat st{};
  if (::stat(path.c_str(), &st) != 0) return fmt::format("unknown ({})", std::strerror(errno));
  unsigned maj = major(st.st_dev), min = minor(st.st_dev);
  std::error_code ec;
  auto sys = std::filesystem::canonical(fmt::format("/sys/dev/block/{}:{}", maj, min), ec);
  if (ec) {
    // No block device (tmpfs, FUSE, overlay, ...): the mount's type and source.
    std::ifstream mi("/proc/self/mountinfo");
    std::string line, best_type, best_source;
    size_t best_len = 0;
    while (std::getline(mi, line)) {
      // id parent maj:min root mount-point options ... - type source super-options
      std::istringstream in(line);
      std::string id, parent, dev, root, mnt;
      in >> id >> parent >> dev >> root >> mnt;
      if (dev != fmt::format("{}:{}", maj, min)) continue;
      auto dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream rest(line.substr(dash + 3));
      std::string type, source;
      rest >> type >> source;
      if (mnt.size() >= best_len) {
        best_len = mnt.size();
        best_type = type;
        best_source = source;
      }
    }
    if (best_type.empty()) return fmt::format("no block device (device {}:{})", maj, min);
    return fmt::format("no block device ({} {})", best_type, best_source);
  }
  std::filesystem::path dev = sys;
  std::string part;
  if (std::filesystem::exists(dev / "partition")) {
    part = dev.filename().string();
    dev = dev.parent_path();
  }
  std::string name = dev.filename().string();
  double gib = 0;
  try {
    gib = std::stod(read_line((dev / "size").string())) * 512 / (1024.0 * 1024 * 1024);
  } catch (...) {
  }
  std::string rot = read_line((dev / "queue/rotational").string()) == "1" ? "rotational" : "non-rotational";
  std::string model = read_line((dev / "device/model").string());
  std::string slaves;
  for (const auto& e : std::filesystem::directory_iterator(dev / "slaves", ec))
    slaves += (slaves.empty() ? "" : ",") + e.path().filename().string();
  return fmt::format("{}{} {:.1f} GiB {}{}{}", name, part.empty() ? "" : " (" + part + ")", gib, rot,
                     model.empty() ? "" : " " + model, slaves.empty() ? "" : " on " + slaves);
}

Machine probe_machine(const std::vector<std::pair<std::string, std::string>>& paths) {
  Machine m;
  m.cores = std::thread::hardware_concurrency();
  std::ifstream mi("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (mi >> key >> kb >> unit)
    if (key == "MemTotal:") {
      m.memory_gib = std::round(static_cast<double>(kb) / (1024.0 * 1024) * 10) / 10;
      break;
    }
  struct ::utsname u{};
  if (::uname(&u) == 0) m.kernel = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  for (const auto& [what, path] : paths)
    m.disk += fmt::format("{}{} {}: {}", m.disk.empty() ? "" : "; ", what, path, describe_device(path));
  return m;
}

std::string render_table(const std::vector<WorkloadResult>& results) {
  std::string o = fmt::format("\n{:<22} {:<27} {:>12} {:>12} {:>8}\n", "workload", "figure", "target", "baseline",
                              "ratio");
  o += std::string(85, '-') + "\n";
  for (const auto& r : results) {
    std::string head = r.workload + " " + r.name;
    bool first = true;
    for (const auto& [name, v] : r.run.figures) {
      std::string b = "-", ratio = "-";
      if (r.has_baseline) {
        if (auto it = r.baseline.figures.find(name); it != r.baseline.figures.end()) b = show(it->second);
        if (auto it = r.ratios.find(name); it != r.ratios.end()) ratio = fmt::format("{:.2f}", it->second);
      }
      o += fmt::format("{:<22} {:<27} {:>12} {:>12} {:>8}\n", first ? head : "", name, show(v), b, ratio);
      first = false;
    }
    o += fmt::format("{:<22} target {} ({}): errors {}, verified {} ({} checked)\n", "", r.target, r.access,
                     r.run.errors, r.run.verified() ? "yes" : "NO", human_bytes(static_cast<double>(r.run.checked_bytes)));
    for (const auto& n : r.run.notes) o += fmt::format("{:<22}   {}\n", "", n);
    if (r.has_baseline) {
      o += fmt::format("{:<22} baseline {} ({}): errors {}, verified {}\n", "", r.baseline_path,
                       r.baseline_access.empty() ? "directory" : r.baseline_access, r.baseline.errors,
                       r.baseline.verified() ? "yes" : "NO");
      for (const auto& n : r.baseline.notes) o += fmt::format("{:<22}   {}\n", "", n);
    }
    o += "\n";
  }
  return o;
}

std::string render_json(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results) {
  std::string o = fmt::format("{{\"machine\": {{\"cores\": {}, \"memory_gib\": {}, \"kernel\": {}, \"disk\": {}}},\n",
                              m.cores, num(m.memory_gib), json_string(m.kernel), json_string(m.disk));
  o += fmt::format(" \"command\": {},\n \"results\": [", json_string(command));
  bool first = true;
  for (const auto& r : results) {
    o += first ? "\n" : ",\n";
    first = false;
    o += fmt::format("  {{\"workload\": {}, \"name\": {}, \"target\": {}, \"access\": {},\n   \"figures\": {},\n",
                     json_string(r.workload), json_string(r.name), json_string(r.target), json_string(r.access),
                     figures_json(r.run.figures));
    if (r.has_baseline) {
      o += fmt::format("   \"baseline\": {{\"path\": {}, \"access\": {}, \"figures\": {}, \"errors\": {}, "
                       "\"verified\": {}}},\n",
                       json_string(r.baseline_path),
                       json_string(r.baseline_access.empty() ? "directory" : r.baseline_access),
                       figures_json(r.baseline.figures), r.baseline.errors,
                       r.baseline.verified() ? "true" : "false");
      o += fmt::format("   \"ratios\": {},\n", figures_json(r.ratios));
    } else {
      o += "   \"baseline\": null,\n   \"ratios\": {},\n";
    }
    std::string notes = "[";
    for (size_t i = 0; i < r.run.notes.size(); ++i) notes += (i ? ", " : "") + json_string(r.run.notes[i]);
    notes += "]";
    o += fmt::format("   \"errors\": {}, \"verified\": {}, \"checked_bytes\": {}, \"notes\": {}", r.run.errors,
                     r.run.verified() ? "true" : "false", r.run.checked_bytes, notes);
    if (!r.run.timeline.empty() || !r.run.events.empty()) {
      o += ",\n   \"events\": " + figures_json(Figures(r.run.events.begin(), r.run.events.end()));
      o += ",\n   \"timeline\": [";
      for (size_t i = 0; i < r.run.timeline.size(); ++i) {
        const auto& p = r.run.timeline[i];
        o += fmt::format("{}\n    {{\"t_s\": {}, \"mib_per_s\": {}, \"read_mib_per_s\": {}, \"write_mib_per_s\": {}, "
                         "\"latency_p99_ms\": {}, \"ops\": {}, \"errors\": {}}}",
                         i ? "," : "", num(p.t), num(p.mib_per_s), num(p.read_mib_per_s), num(p.write_mib_per_s),
                         num(p.latency_p99_ms), p.ops, p.errors);
      }
      o += "]";
    }
    o += "}";
  }
  o += "\n ]}\n";
  return o;
}

std::string render_html(const Machine& m, const std::string& command, const std::vector<WorkloadResult>& results) {
  std::string o = R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>weft bench report</title>
<style>body{font-family:sans-serif;max-width:820px;margin:2em auto;color:#222}
h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:2em}
code,pre{background:#f4f4f4;padding:2px 4px}pre{white-space:pre-wrap}
.bad{color:#c0392b;font-weight:bold}.ok{color:#27ae60}
table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}
td:first-child,th:first-child{text-align:left}</style></head><body>
<h1>weft bench</h1>
)";
  o += fmt::format("<p>Machine: {} cores, {} GiB memory, {}{}</p>\n<p>Command:</p><pre>{}</pre>\n", m.cores,
                   show(m.memory_gib), html_escape(m.kernel), m.disk.empty() ? "" : ", disk " + html_escape(m.disk),
                   html_escape(command));
  for (const auto& r : results) {
    o += fmt::format("<h2>{} {}</h2>\n", r.workload, html_escape(r.name));
    bool ok = r.run.ok() && (!r.has_baseline || r.baseline.ok());
    o += fmt::format("<p>Target <code>{}</code> ({}); errors {}, <span class=\"{}\">{}</span></p>\n",
                     html_escape(r.target), r.access, r.run.errors + (r.has_baseline ? r.baseline.errors : 0),
                     ok ? "ok" : "bad", ok ? "every byte read was verified" : r.run.verified() && (!r.has_baseline || r.baseline.verified()) ? "ERRORS (every byte read matched)" : "VERIFICATION FAILED");
    if (!r.run.notes.empty()) {
      o += "<ul>";
      for (const auto& n : r.run.notes) o += "<li>" + html_escape(n) + "</li>";
      for (const auto& n : r.baseline.notes) o += "<li>baseline: " + html_escape(n) + "</li>";
      o += "</ul>\n";
    }
    if (!r.run.timeline.empty()) {
      o += line_svg(r.run.timeline, r.run.events, "throughput per second (MiB/s, reads + writes)",
                    &TimelinePoint::mib_per_s, "#3b6fb6");
      o += "<br>";
      o += line_svg(r.run.timeline, r.run.events, "latency p99 per second (ms)", &TimelinePoint::latency_p99_ms,
                    "#8e44ad");
      o += "<br>";
    }
    o += bars_svg(r) + "\n";
    o += "<table><tr><th>figure</th><th>target</th><th>baseline</th><th>ratio</th></tr>\n";
    for (const auto& [name, v] : r.run.figures) {
      std::string b = "-", ratio = "-";
      if (r.has_baseline) {
        if (auto it = r.baseline.figures.find(name); it != r.baseline.figures.end()) b = show(it->second);
        if (auto it = r.ratios.find(name); it != r.ratios.end()) ratio = fmt::format("{:.2f}", it->second);
      }
      o += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", html_escape(name), show(v), b,
                       ratio);
    }
    o += "</table>\n";
  }
  o += "</body></html>\n";
  return o;
}

}  // namespace weft::bench
