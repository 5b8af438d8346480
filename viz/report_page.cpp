#include "viz/report_page.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/posix_file.hpp"
#include "viz/report_format.hpp"
#include "viz/simulation_charts.hpp"
#include "viz/sweep_charts.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;

/// Replaces every `from` in `s` by `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

/// JSON text safe inside a <script> element: "</" and "<!--" only occur inside JSON strings,
/// where "<\/" and "<\u0021--" mean the same.
std::string script_safe_json(const json& j) {
  return replace_all(replace_all(j.dump(), "</", "<\\/"), "<!--", "<\\u0021--");
}

/// A library's text safe inside a <script> element ("</script" only occurs in its strings).
std::string script_safe_js(std::string js) {
  for (const char* tag : {"</script", "</SCRIPT", "</Script"}) {
    js = replace_all(js, tag, std::string("<\\/") + (tag + 2));
  }
  return js;
}

}  // namespace

std::string render_report_html(const std::string& title, const std::vector<ReportSection>& sections,
                               const std::filesystem::path& vega_dir) {
  std::string scripts;
  for (const char* name : kVegaFiles) {
    const std::filesystem::path file = vega_dir / name;
    if (!std::filesystem::is_regular_file(file)) {
      throw Error(
          fmt::format("{}: not found (the report inlines Vega's browser builds: run "
                      "scripts/fetch_vega.sh, which needs npm)",
                      file.string()));
    }
    scripts += "<script>\n" +
               script_safe_js(read_input_file(file, "report input", kMaxDataFileBytes)) +
               "\n</script>\n";
  }
  json specs = json::object();
  std::string body;
  for (const ReportSection& s : sections) {
    body += fmt::format("<section id=\"section-{}\">\n<h2>{}</h2>\n<p class=\"note\">{}</p>\n",
                        escape_html(s.id), escape_html(s.title), escape_html(s.note));
    if (s.spec) {
      body += fmt::format("<div class=\"chart\" id=\"chart-{}\"></div>\n", escape_html(s.id));
      specs[s.id] = *s.spec;
    } else {
      body += s.html;
    }
    body += "</section>\n";
  }
  std::string html = R"(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>)" + escape_html(title) +
                     R"(</title>
<style>
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
p.note { color: #555; font-size: 13px; max-width: 1100px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
table.summary th { background: #f3f3f3; }
table.ranked td { text-align: right; } table.ranked th { background: #f3f3f3; }
#report-errors { color: #b22222; }
</style>
<script>
// Collects script errors, failed charts, Vega warnings and console errors into the page, so
// that a headless browser's --dump-dom shows them.
window.reportProblem = function (kind, message) {
  var list = document.getElementById('report-errors');
  if (!list) {
    (window.pendingProblems = window.pendingProblems || []).push([kind, message]);
    return;
  }
  var item = document.createElement('li');
  item.className = 'report-problem';
  item.textContent = kind + ': ' + message;
  list.appendChild(item);
  list.hidden = false;
};
window.addEventListener('error', function (e) {
  window.reportProblem('error', (e.message || String(e.error)) + ' (' + (e.filename || '') +
                                ':' + (e.lineno || '') + ')');
});
window.addEventListener('unhandledrejection', function (e) {
  window.reportProblem('unhandled rejection', String(e.reason));
});
(function () {
  var error = console.error, warn = console.warn;
  var join = function (args) { return Array.prototype.join.call(args, ' '); };
  console.error = function () {
    window.reportProblem('console.error', join(arguments));
    error.apply(console, arguments);
  };
  console.warn = function () {
    window.reportProblem('console.warn', join(arguments));
    warn.apply(console, arguments);
  };
})();
</script>
)" + scripts + R"(</head>
<body data-report-status="loading">
<h1>)" + escape_html(title) +
                     R"(</h1>
<ul id="report-errors" hidden></ul>
)" + body + R"(<script type="application/json" id="report-specs">)" +
                     script_safe_json(specs) +
                     R"(</script>
<script>
(function () {
  (window.pendingProblems || []).forEach(function (p) { window.reportProblem(p[0], p[1]); });
  var specs = JSON.parse(document.getElementById('report-specs').textContent);
  var ids = Object.keys(specs);
  var done = ids.map(function (id) {
    var el = document.getElementById('chart-' + id);
    return vegaEmbed(el, specs[id], {renderer: 'svg', actions: false,
                                     logLevel: vega.Warn})
      .then(function (result) { el.setAttribute('data-rendered', 'true'); return true; })
      .catch(function (e) { window.reportProblem('chart ' + id, String(e)); return false; });
  });
  Promise.all(done).then(function (ok) {
    document.body.setAttribute('data-report-status',
                               ok.every(function (x) { return x; }) ? 'rendered' : 'failed');
  });
})();
</script>
</body>
</html>
)";
  return html;
}

namespace {
/// DIR/report.html (whole or not at all) of `sections` under `title`; the path written.
std::filesystem::path write_page(const std::filesystem::path& dir, const std::string& title,
                                 const std::vector<ReportSection>& sections,
                                 const std::filesystem::path& vega_dir) {
  const std::string html = render_report_html(title, sections, vega_dir);
  const auto out_path = dir / "report.html";
  AtomicFile out(out_path);  // never follows a planted temporary; "no space left" names it
  out.write(html);
  out.commit();
  return out_path;
}
}  // namespace

std::filesystem::path write_report(const std::filesystem::path& dir,
                                   const std::filesystem::path& vega_dir, const GanttOptions& gantt,
                                   std::optional<Timeline> timeline) {
  const ReportInput in = read_report_input(dir, std::move(timeline));
  std::vector<ReportSection> sections;
  std::string title = "traintwin report";
  if (in.summary) {
    auto s = simulation_sections(*in.summary, in.timeline, in.timeline_origin, gantt);
    sections.insert(sections.end(), s.begin(), s.end());
    if (!in.summary->scenario.empty()) title += ": " + in.summary->scenario;
  }
  if (in.sweep) {
    auto s = sweep_sections(*in.sweep);
    sections.insert(sections.end(), s.begin(), s.end());
    if (!in.summary) title += ": sweep";
  }
  return write_page(dir, title, sections, vega_dir);
}

std::filesystem::path write_goodput_report(const std::filesystem::path& dir,
                                           const std::filesystem::path& vega_dir,
                                           const GoodputPageInput& in) {
  return write_page(dir, "traintwin goodput: " + in.scenario, goodput_sections(in), vega_dir);
}

std::filesystem::path write_cluster_report(const std::filesystem::path& dir,
                                           const std::filesystem::path& vega_dir,
                                           const ClusterResult& r) {
  return write_page(dir, "traintwin cluster: " + r.name, cluster_sections(r), vega_dir);
}

std::vector<std::filesystem::path> vega_dir_candidates(const std::filesystem::path& executable) {
  std::vector<std::filesystem::path> out;
  if (const char* env = std::getenv("TRAINTWIN_VEGA_DIR"); env != nullptr && *env != '\0') {
    out.emplace_back(env);
  }
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::weakly_canonical(executable, ec);
  if (ec) exe = executable;
  const std::filesystem::path bin_dir = exe.parent_path();
  if (!bin_dir.empty()) {
    out.push_back(bin_dir.parent_path() / "data" / "vega");
    out.push_back(bin_dir.parent_path().parent_path() / "data" / "vega");
  }
  out.push_back(std::filesystem::path("data") / "vega");
  return out;
}

std::optional<std::filesystem::path> find_vega_dir(const std::filesystem::path& executable) {
  for (const auto& dir : vega_dir_candidates(executable)) {
    const bool complete =
        std::all_of(std::begin(kVegaFiles), std::end(kVegaFiles),
                    [&](const char* f) { return std::filesystem::is_regular_file(dir / f); });
    if (complete) return dir;
  }
  return std::nullopt;
}

}  // namespace traintwin
