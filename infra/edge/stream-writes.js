import cf from 'cloudfront';

// CloudFront Function (viewer request) on /v1/stream/*: a stream keeps one URL, but the stream
// function only reads. Writes (PUT, POST, DELETE, PATCH) go to the API function, which serves
// the same protocol. The template inlines this file (infra/check.py checks they match and runs
// it in Node).

function handler(event) {
  var method = event.request.method;
  if (method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS') {
    cf.selectRequestOriginById('api');
  }
  return event.request;
}
