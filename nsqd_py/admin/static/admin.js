// nsqadmin's pages: sortable tables, the refresh bar, rates between refreshes, and the action buttons, which
// call the JSON API (/api/...) so the ACL and the notifications apply as to any client. No framework, no build.
"use strict";

(function () {
  var body = document.body;
  var base = body.dataset.base;
  var now = Number(body.dataset.now);
  var REFRESH_SECONDS = 10;

  function flash(text, kind) {
    var box = document.getElementById("flash");
    box.textContent = text;
    box.className = "alert " + kind;
  }

  // --- refresh: a timestamp, a manual button, and an auto-refresh toggle remembered across pages ---
  function setUpRefresh() {
    document.getElementById("updated").textContent = new Date(now).toLocaleTimeString();
    document.getElementById("refresh-every").textContent = REFRESH_SECONDS;
    var toggle = document.getElementById("auto-refresh");
    var timer = null;
    function arm() {
      clearTimeout(timer);
      if (toggle.checked) {
        timer = setTimeout(function () { location.reload(); }, REFRESH_SECONDS * 1000);
      }
    }
    toggle.checked = localStorage.getItem("nsqadmin.autoRefresh") !== "off";
    toggle.addEventListener("change", function () {
      localStorage.setItem("nsqadmin.autoRefresh", toggle.checked ? "on" : "off");
      arm();
    });
    document.getElementById("refresh-now").addEventListener("click", function () { location.reload(); });
    arm();
  }

  // --- rates: message counts against the ones this browser saw at its last load of the page ---
  function showRates() {
    var key = "nsqadmin.counts:" + location.pathname;
    var previous = JSON.parse(sessionStorage.getItem(key) || "{}");
    var seen = {};
    document.querySelectorAll("[data-rate-key]").forEach(function (cell) {
      var count = Number(cell.dataset.count);
      var before = previous[cell.dataset.rateKey];
      seen[cell.dataset.rateKey] = [count, now];
      if (before && now > before[1] && count >= before[0]) {
        var rate = (count - before[0]) * 1000 / (now - before[1]);
        cell.textContent = rate.toLocaleString(undefined, {maximumFractionDigits: 1});
        cell.dataset.sort = rate;
        cell.title = "since " + new Date(before[1]).toLocaleTimeString();
      }
    });
    sessionStorage.setItem(key, JSON.stringify(seen));
  }

  // --- graphite: the last interval's rate through /api/graphite ---
  function showGraphiteRates() {
    document.querySelectorAll(".graphite-rate").forEach(function (el) {
      var url = base + "api/graphite?metric=rate&target=" + encodeURIComponent(el.dataset.target);
      fetch(url).then(function (r) { return r.json(); }).then(function (answer) {
        el.textContent = answer.rate === undefined ? "N/A" : answer.rate;
      }, function () { el.textContent = "N/A"; });
    });
  }

  // --- sortable tables: click a header; numbers sort by their data-sort value ---
  function sortKey(cell) {
    var raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    var num = Number(String(raw).replace(/,/g, ""));
    return raw !== "" && !isNaN(num) ? num : String(raw).toLowerCase();
  }

  function makeSortable(table) {
    table.querySelectorAll("thead th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        var descending = th.getAttribute("aria-sort") === "ascending";
        table.querySelectorAll("thead th").forEach(function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", descending ? "descending" : "ascending");
        table.querySelectorAll("tbody").forEach(function (tbody) {
          var rows = Array.prototype.slice.call(tbody.rows);
          rows.sort(function (a, b) {
            var x = sortKey(a.cells[column] || a), y = sortKey(b.cells[column] || b);
            var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
            return descending ? -order : order;
          });
          rows.forEach(function (row) { tbody.appendChild(row); });
        });
      });
    });
  }

  // --- actions: confirm, call the API, then reload (or go to data-next) ---
  function call(method, url, payload) {
    var init = {method: method, headers: {"Content-Type": "application/json"}};
    if (payload !== undefined) { init.body = payload; }
    return fetch(url, init).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (answer) {
        if (!r.ok) { throw new Error(r.status + " " + (answer.message || r.statusText)); }
        return answer;
      });
    });
  }

  function done(answer, next) {
    if (answer.message) {  // a partial success: say so before moving on
      sessionStorage.setItem("nsqadmin.flash", answer.message);
    }
    if (next) { location.assign(next); } else { location.reload(); }
  }

  function setUpActions() {
    document.querySelectorAll("button.action").forEach(function (button) {
      button.addEventListener("click", function () {
        if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) { return; }
        button.disabled = true;
        call(button.dataset.method, button.dataset.url, button.dataset.body).then(function (answer) {
          done(answer, button.dataset.next);
        }, function (err) {
          button.disabled = false;
          flash("Failed: " + err.message, "error");
        });
      });
    });
    var form = document.getElementById("create");
    if (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        var payload = JSON.stringify({topic: form.elements.topic.value, channel: form.elements.channel.value});
        call("POST", form.dataset.url, payload).then(function (answer) { done(answer); }, function (err) {
          flash("Failed: " + err.message, "error");
        });
      });
    }
    var left = sessionStorage.getItem("nsqadmin.flash");
    if (left) {
      sessionStorage.removeItem("nsqadmin.flash");
      flash(left, "warning");
    }
  }

  setUpRefresh();
  showRates();
  showGraphiteRates();
  document.querySelectorAll("table.sortable").forEach(makeSortable);
  setUpActions();
})();
