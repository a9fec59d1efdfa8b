// fastpath demo site: reports how the current page and this script were
// delivered, using the Navigation and Resource Timing APIs of the browser.
(function () {
  'use strict';

  function formatBytes(n) {
    if (typeof n !== 'number' || !isFinite(n) || n <= 0) {
      return null;
    }
    if (n < 1024) {
      return n + ' bytes';
    }
    return (n / 1024).toFixed(1) + ' KiB';
  }

  function formatMs(ms) {
    if (typeof ms !== 'number' || !isFinite(ms) || ms < 0) {
      return null;
    }
    return ms < 10 ? ms.toFixed(2) + ' ms' : Math.round(ms) + ' ms';
  }

  function describeNavigation() {
    var entries = performance.getEntriesByType ? performance.getEntriesByType('navigation') : [];
    var nav = entries && entries[0];
    if (!nav) {
      return null;
    }
    var parts = [];
    var total = formatMs(nav.responseEnd - nav.startTime);
    var waiting = formatMs(nav.responseStart - nav.requestStart);
    if (total) {
      parts.push('This page arrived in ' + total);
    }
    if (waiting) {
      parts.push('the server answered after ' + waiting);
    }
    if (nav.nextHopProtocol) {
      parts.push('over ' + nav.nextHopProtocol);
    }
    return parts.length ? parts.join(', ') + '.' : null;
  }

  function describeScript() {
    var entries = performance.getEntriesByType ? performance.getEntriesByType('resource') : [];
    for (var i = 0; i < entries.length; i++) {
      var e = entries[i];
      if (!/\/app\.js(\?|$)/.test(e.name)) {
        continue;
      }
      var wire = formatBytes(e.encodedBodySize);
      var plain = formatBytes(e.decodedBodySize);
      if (e.transferSize === 0 && e.decodedBodySize > 0) {
        return 'app.js came from the browser cache (' + plain + ').';
      }
      if (wire && plain && e.encodedBodySize < e.decodedBodySize) {
        return 'app.js travelled precompressed: ' + wire + ' on the wire for ' + plain + ' of script.';
      }
      if (plain) {
        return 'app.js travelled as is: ' + plain + '.';
      }
    }
    return null;
  }

  function report() {
    var target = document.getElementById('timing');
    if (!target) {
      return;
    }
    var lines = [describeNavigation(), describeScript()].filter(Boolean);
    target.textContent = lines.length
      ? lines.join(' ')
      : 'Your browser does not expose timing information for this page.';
  }

  function markCurrentLink() {
    var here = location.pathname.replace(/index\.html$/, '');
    var links = document.querySelectorAll('nav a');
    for (var i = 0; i < links.length; i++) {
      var path = links[i].getAttribute('href').replace(/index\.html$/, '');
      if (path === here) {
        links[i].setAttribute('aria-current', 'page');
      } else {
        links[i].removeAttribute('aria-current');
      }
    }
  }

  function start() {
    markCurrentLink();
    // Resource timing entries are complete once the load event has passed.
    if (document.readyState === 'complete') {
      report();
    } else {
      window.addEventListener('load', function () {
        setTimeout(report, 0);
      });
    }
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
