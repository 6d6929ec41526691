// The console's Overview, kept current: every 30 seconds while the tab is visible, the page is
// fetched again and its figures (#live) replaced. Without this script the page is the same, as of
// its loading; the browser's reload button does what this does.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.fetch || !window.DOMParser) return;
  var source = live.getAttribute("data-refresh");
  function refresh() {
    // Not while the tab is hidden, nor while focus is inside the figures: replacing them then
    // would drop a keyboard user's place on the page.
    if (document.visibilityState !== "visible" || live.contains(document.activeElement)) return;
    fetch(source, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (fresh) live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
      })
      .catch(function () { /* the figures stay as they were; the next turn tries again */ });
  }
  window.setInterval(refresh, 30000);
})();
