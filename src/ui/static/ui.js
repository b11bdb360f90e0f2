// The dashboard's script: progressive enhancement only (every page works
// without it). It refreshes the live parts of a page from this server.
(function () {
  'use strict';

  function csrf() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : '';
  }

  async function fetchHtml(url) {
    const response = await fetch(url, { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'text/html' } });
    if (!response.ok) throw new Error('HTTP ' + response.status);
    return response.text();
  }

  // A section with id "live" and data-refresh (ms) is reloaded from the
  // page's own address, unless the "live" box is unticked or the reader is
  // typing in it.
  function refreshLiveSection() {
    const section = document.getElementById('live');
    if (!section) return;
    const every = Number(section.dataset.refresh) || 2000;
    const toggle = document.getElementById('live-refresh');
    const tick = async () => {
      const wanted = (!toggle || toggle.checked) && document.visibilityState === 'visible';
      if (wanted && !section.contains(document.activeElement)) {
        try {
          const doc = new DOMParser().parseFromString(await fetchHtml(location.href), 'text/html');
          const fresh = doc.getElementById('live');
          if (fresh && fresh.innerHTML !== section.innerHTML) section.innerHTML = fresh.innerHTML;
        } catch (e) { /* the next tick tries again */ }
      }
      setTimeout(tick, every);
    };
    setTimeout(tick, every);
  }

  // The job's progress (state, timeline, attempts, events), reloaded while
  // any attempt is still pending, running or unknown.
  function followTimeline(box, onUpdate) {
    let stopped = false;
    const step = async () => {
      if (stopped || !box.dataset.job) return;
      try {
        box.innerHTML = await fetchHtml('/ui/jobs/' + encodeURIComponent(box.dataset.job) + '/timeline');
      } catch (e) { /* try again below */ }
      const progress = box.querySelector('.progress');
      if (onUpdate) onUpdate(progress);
      if (!progress || progress.dataset.open === 'true') {
        setTimeout(step, 400);
      } else {
        box.dataset.settled = 'true';
      }
    };
    step();
    return { stop() { stopped = true; } };
  }

  window.OneJob = { csrf, followTimeline };

  document.addEventListener('DOMContentLoaded', () => {
    refreshLiveSection();
    const box = document.getElementById('timeline-box');
    if (box && box.dataset.job && !document.getElementById('demo')) {
      const progress = box.querySelector('.progress');
      if (progress && progress.dataset.open === 'true') followTimeline(box);
      else box.dataset.settled = 'true';
    }
  });
})();
