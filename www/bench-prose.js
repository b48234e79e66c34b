// Prose whose every trial starts differently, so no cache can be reused between trials (shared
// by the bench page and its worker).
export function prose(trial) {
  const words = ('the river carried light across the valley while old stones remembered every season '
    + 'and travellers wrote letters about bread music weather distant cities quiet harbours').split(' ');
  let s = `Story ${trial * 7919 % 1000}: `;
  let x = trial + 1;
  for (let i = 0; i < 1200; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    s += words[x % words.length] + (i % 13 === 12 ? '. ' : ' ');
  }
  return s;
}
