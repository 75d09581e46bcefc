// Live timeline rows: the page's timeline names its stream (data-live); each "row"
// event is a row's HTML, rendered and escaped by the server; "end" reloads the page,
// which then shows the finished run (graph, steps, result).
(function () {
  "use strict";
  var table = document.getElementById("timeline");
  if (!table || !table.dataset.live || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var source = new EventSource(table.dataset.live);
  source.addEventListener("row", function (e) {
    var tpl = document.createElement("template");
    tpl.innerHTML = e.data.trim();
    var row = tpl.content.firstElementChild;
    if (row && !body.querySelector('tr[data-seq="' + row.dataset.seq + '"]')) {
      body.appendChild(row);
    }
  });
  source.addEventListener("end", function () {
    source.close();
    window.location.reload();
  });
}());
