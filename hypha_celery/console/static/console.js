// A live run page: the page's timeline names its stream (data-live). Each "row" event
// is a row's HTML, "facts" the run's facts (status, steps, events, dead letters) and
// "graph" the drawing, all rendered and escaped by the server; "end" reloads the page,
// which then shows the finished run (steps, calls, result).
(function () {
  "use strict";
  var table = document.getElementById("timeline");
  if (!table || !table.dataset.live || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var source = new EventSource(table.dataset.live);
  function parsed(html) {
    var tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    return tpl.content;
  }
  source.addEventListener("row", function (e) {
    var row = parsed(e.data).firstElementChild;
    if (row && !body.querySelector('tr[data-seq="' + row.dataset.seq + '"]')) {
      body.appendChild(row);
    }
  });
  source.addEventListener("facts", function (e) {
    var facts = document.getElementById("facts");
    var fresh = parsed(e.data).firstElementChild;
    if (facts && fresh) { facts.replaceWith(fresh); }
  });
  source.addEventListener("graph", function (e) {
    var graph = document.getElementById("graph");
    if (graph) { graph.replaceChildren(parsed(e.data)); }
  });
  source.addEventListener("end", function () {
    source.close();
    window.location.reload();
  });
}());
