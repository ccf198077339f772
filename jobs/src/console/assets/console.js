// The console works without this script; it only adds comfort.
// - Pages whose <body> has data-refresh="N" load data-refresh-to (the overview's own
//   address, without the ?done= note an action left) every N seconds, unless the reader is
//   typing in a field (a reload would throw the input away).
// - Forms with data-confirm="question" ask before they post.
(function () {
  "use strict";
  var every = Number(document.body.dataset.refresh || 0);
  if (every > 0) {
    setInterval(function () {
      var active = document.activeElement;
      if (!active || active === document.body) {
        location.replace(document.body.dataset.refreshTo || location.pathname);
      }
    }, every * 1000);
  }
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  });
})();
